"""Load and validate tenants/*.yaml; every problem is reported with its file and key."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gateway.entry_points import entry_point_problems
from gateway.errors import ConfigError
from gateway.tenancy.config import CROSS_PROBLEMS_COLLECTED, TenantConfig, allowed_keys, allowed_values, nearest
from gateway.tenancy.parsing import PARALLEL_MIN_FILES, Parsed, parse_file, parse_many

log = logging.getLogger("gateway")
# What each tenant file held when last read, by path (a str: comparing Paths was a third of a
# second for 20,000 files): ((mtime_ns, size), max_limit), the tenant, its problems. Per process;
# an entry is replaced when its file changes.
_READ: dict[str, tuple[tuple[tuple[int, int], int | None], TenantConfig | None, tuple[ConfigProblem, ...]]] = {}


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    file: Path | str  # a tenant file, or the platform API call that sent the config
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key or '<root>'}: {self.message}"


def read_tenants(directory: Path, *, max_limit: int | None = None) -> tuple[dict[str, TenantConfig], list[ConfigProblem]]:
    """Every tenant file in `directory` (or the one file it names), and every problem found (never
    stops at the first). With `max_limit` (GATEWAY_MAX_LIMIT), a configured limit above it is one."""
    tenants, _, problems = read_tenant_files(directory, max_limit=max_limit)
    return tenants, problems


def read_tenant_files(directory: Path, *, max_limit: int | None = None, parsed: ParsedFiles | None = None
                      ) -> tuple[dict[str, TenantConfig], dict[str, Path]]:
    """read_tenants, with the file each tenant came from. With `parsed`, a file unchanged since it was
    last parsed is not parsed again (it is validated again). Many files not seen before are parsed
    by several processes at once (parse_many)."""
    tenants: dict[str, TenantConfig] = {}
    origins: dict[str, Path] = {}
    problems: list[ConfigProblem] = []
    if directory.is_file():
        files = [directory]
    elif not directory.is_dir():
        return {}, {}, [ConfigProblem(directory, "", "no such tenants directory or file (set GATEWAY_TENANTS_DIR, "
                                                 "or name a folder of *.yaml or one tenant file)")]
    else:
        files = [directory / name for name in sorted(
            entry.name for entry in os.scandir(directory) if entry.name.endswith((".yaml", ".yml")))]
    if not files:
        problems.append(ConfigProblem(directory, "", "no tenant files (*.yaml) found"))
    stamps: dict[Path, tuple[int, int] | OSError] = {}
    for path in files:
        try:
            stat = path.stat()
            stamps[path] = (stat.st_mtime_ns, stat.st_size)
        except OSError as exc:
            stamps[path] = exc
    cold = [path for path, stamp in stamps.items() if isinstance(stamp, tuple)
            and _remembered(path, stamp, max_limit) is None and (parsed is None or parsed.get(path, stamp) is None)]
    ahead = parse_many(cold) if len(cold) >= PARALLEL_MIN_FILES else {}
    for path in files:
        stamp = stamps[path]
        if isinstance(stamp, OSError):
            problems.append(ConfigProblem(path, "", f"cannot be read: {stamp.strerror or stamp}"))
            continue
        tenant, found = _read(path, stamp, max_limit=max_limit, parsed=parsed, ahead=ahead.get(str(path)))
        problems.extend(found)
        if tenant is None:
            continue
        if tenant.id in tenants:
            problems.append(ConfigProblem(path, "id", f"tenant {tenant.id!r} is already defined in {origins[tenant.id]}"))
            continue
        tenants[tenant.id] = tenant
        origins[tenant.id] = path
    if parsed is not None:
        parsed.save(keep=files)
    return tenants, origins, problems


def read_tenant_file(path: Path, *, max_limit: int | None = None,
                     parsed: ParsedFiles | None = None) -> tuple[TenantConfig | None, list[ConfigProblem]]:
    """One tenant file: its tenant, or None and every problem found in it.

    Remembered by (mtime, size): `gateway serve` checks every file before it starts the app, which
    reads them again, and the reloader reads a changed file once; with 20,000 files each full
    read was seconds of start-up."""
    try:
        stat = path.stat()
    except OSError as exc:
        return None, [ConfigProblem(path, "", f"cannot be read: {exc.strerror or exc}")]
    return _read(path, (stat.st_mtime_ns, stat.st_size), max_limit=max_limit, parsed=parsed)


def _remembered(path: Path, stamp: tuple[int, int], max_limit: int | None
                ) -> tuple[TenantConfig | None, tuple[ConfigProblem, ...]] | None:
    known = _READ.get(str(path))
    if known is not None and known[0] == (stamp, max_limit):
        return known[1], known[2]
    return None


def _read(path: Path, stamp: tuple[int, int], *, max_limit: int | None, parsed: ParsedFiles | None,
          ahead: Parsed | None = None) -> tuple[TenantConfig | None, list[ConfigProblem]]:
    known = _remembered(path, stamp, max_limit)
    if known is not None:
        return known[0], list(known[1])
    raw = parsed.get(path, stamp) if parsed is not None else None
    if raw is not None:
        found = check_tenant(raw, path, max_limit=max_limit)
    else:
        if ahead is None or ahead.stamp != stamp:
            ahead = parse_file(path)
        if ahead.unreadable:
            return None, [ConfigProblem(path, "", f"cannot be read: {ahead.error}")]
        if ahead.error is not None:
            found = (None, [ConfigProblem(path, "", f"not valid YAML: {ahead.error}")])
        else:
            if parsed is not None:
                parsed.put(path, stamp, ahead.raw)
            found = check_tenant(ahead.raw, path, max_limit=max_limit)
    _READ[str(path)] = ((stamp, max_limit), found[0], tuple(found[1]))
    return found


class ParsedFiles:
    """Tenant files as parsed (not validated), kept in a JSON file between runs, by path and (mtime,
    size): a restart parses only the files that changed. Parsing YAML was two thirds of reading
    20,000 tenant files (2.0 s of 3.3 s CPU); every file is still validated.

    The file sits beside a milvus-lite store (`<store>.tenants.json`); a damaged or foreign one is
    ignored and rewritten. Only plain values (mappings, lists, strings, numbers, booleans, null)
    are kept: a YAML date or other tagged value makes its file parsed every time, so that a cached
    file never validates differently from a parsed one.
    """

    FORMAT = 1

    def __init__(self, path: Path) -> None:
        self.path = path
        self._loaded: dict[str, list] | None = None  # read on first use: a process whose files are all
        self._changed = False                          # remembered (_READ) never reads it

    @property
    def _entries(self) -> dict[str, list]:
        if self._loaded is None:
            self._loaded = {}
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if isinstance(data, dict) and data.get("format") == self.FORMAT and isinstance(data.get("files"), dict):
                    self._loaded = data["files"]
            except (OSError, ValueError):
                pass
        return self._loaded

    def get(self, file: Path, stamp: tuple[int, int]) -> object | None:
        entry = self._entries.get(str(file))
        if isinstance(entry, list) and len(entry) == 3 and entry[0] == stamp[0] and entry[1] == stamp[1]:
            return entry[2]
        return None

    def put(self, file: Path, stamp: tuple[int, int], raw: object) -> None:
        if _plain(raw):
            self._entries[str(file)] = [stamp[0], stamp[1], raw]
            self._changed = True

    def save(self, keep: list[Path]) -> None:
        """Write the entries of the files in `keep` (atomically), when anything changed."""
        if self._loaded is None and not self._changed:
            return  # never read, so nothing was added: the file is as it was
        names = {str(p) for p in keep}
        kept = {name: entry for name, entry in self._entries.items() if name in names}
        if not self._changed and len(kept) == len(self._entries):
            return
        self._loaded, self._changed = kept, False
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({"format": self.FORMAT, "files": kept}), encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError as exc:  # a read-only directory: every start parses every file, as without it
            log.warning("cannot write the parsed tenant files to %s: %s", self.path, exc.strerror or exc)
            with contextlib.suppress(OSError):  # on a read-only file system there is nothing to remove
                temporary.unlink(missing_ok=True)


def _plain(value: object) -> bool:
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return False


def remembered_stamp(path: Path | str) -> tuple[int, int] | None:
    """(mtime_ns, size) of `path` when this process last read it, or None."""
    known = _READ.get(str(path))
    return known[0][0] if known is not None else None


def check_tenant(raw: object, where: Path | str, *,
                 max_limit: int | None = None) -> tuple[TenantConfig | None, list[ConfigProblem]]:
    """Validate one tenant's config as read from a file or sent to the platform API (`where` names it).

    Every problem in one pass: the keys that fail, then what the sections that did validate say of
    each other (routes, pipelines, seeds), limits above `max_limit` and entry points that do not import."""
    tenant, problems = _checked(raw, where, max_limit)
    return (None, problems) if problems else (tenant, [])


def salvaged_tenant(path: Path, *, max_limit: int | None = None) -> TenantConfig | None:
    """The tenant of a file that has problems, with the parts that fail replaced by stand-ins (see
    `_salvaged`), so that checks of what start-up builds from it look past its first problem
    (gateway/preflight.py); None when the file cannot be read or parsed, or nothing can stand in."""
    parsed = parse_file(path)
    if parsed.error is not None or not isinstance(parsed.raw, dict):
        return None
    return _checked(parsed.raw, path, max_limit)[0]


def _checked(raw: object, where: Path | str, max_limit: int | None) -> tuple[TenantConfig | None, list[ConfigProblem]]:
    """The tenant (or its salvaged stand-in when keys fail) and every problem found."""
    if not isinstance(raw, dict):
        return None, [ConfigProblem(where, "", f"expected a mapping at the top, got {type(raw).__name__}")]
    problems: list[ConfigProblem] = []
    try:
        tenant: TenantConfig | None = TenantConfig.model_validate(raw, context=_COLLECTED)
    except ValidationError as exc:
        problems = _problems(where, exc)
        tenant = _salvaged(raw, exc)
    if tenant is not None:
        found = [*tenant.cross_problems(), *(_limit_problems(tenant, max_limit) if max_limit is not None else []),
                 # Imported here so `check-config` reports them as start-up would (gateway/entry_points.py).
                 *entry_point_problems(tenant)]
        problems += [ConfigProblem(where, key, message) for key, message in found]
    return tenant, problems


_COLLECTED = {CROSS_PROBLEMS_COLLECTED: True}
# What a section that failed validation is replaced by in `_salvaged`: valid, and naming nothing
# that another section could trip over. A collection keeps the keys other checks read.
_STAND_IN_COLLECTION = {"trust_tier": "first-party"}
_KEPT_COLLECTION_KEYS = ("pipeline", "tool_prefix", "retriever", "limit")
_STAND_IN_PIPELINE = {"stages": [{"parentExpand": {}}]}
_STAND_IN_LLM = {"base_url": "http://stand-in", "model": "stand-in"}
_STAND_IN_ID = "tenant"


def _salvaged(raw: dict, exc: ValidationError) -> TenantConfig | None:
    """The tenant with each part that failed validation replaced by a stand-in, so that the parts
    that did validate are still checked against each other and against start-up in the same run;
    None when a failure is in a part with no safe stand-in (a namespace, a name used as a key).

    A stand-in only hides problems, never adds one: a failed collection keeps its name (routes and
    seeds naming it stay valid) and the keys other sections refer to; a failed pipeline keeps its
    name; a failed `llm` section still counts as present."""
    data = dict(raw)
    collections: dict[tuple[str, str], set[str]] = {}
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        head = loc[0] if loc else ""
        if not loc or "[key]" in loc:
            return None
        if head == "namespaces" and len(loc) >= 4 and loc[2] == "collections":
            collections.setdefault((loc[1], loc[3]), set()).add(loc[4] if len(loc) > 4 else "")
        elif head == "namespaces":
            return None
        elif head == "pipelines" and len(loc) >= 2:
            data["pipelines"] = {**data["pipelines"], loc[1]: _STAND_IN_PIPELINE}
        elif head == "llm":
            data["llm"] = _STAND_IN_LLM
        elif head == "id":
            data["id"] = _STAND_IN_ID
        else:  # an unknown key, or a section whose defaults refer to nothing (router, seed, limits, ...)
            data.pop(head, None)
    if collections:
        namespaces = {name: dict(ns) for name, ns in data["namespaces"].items()}
        for (ns, name), bad in collections.items():
            original = namespaces[ns]["collections"][name]
            kept = {k: v for k, v in original.items() if k in _KEPT_COLLECTION_KEYS and k not in bad} \
                if isinstance(original, dict) and "" not in bad else {}
            namespaces[ns]["collections"] = {**namespaces[ns]["collections"], name: {**_STAND_IN_COLLECTION, **kept}}
        data["namespaces"] = namespaces
    try:
        return TenantConfig.model_validate(data, context=_COLLECTED)
    except ValidationError:
        return None


def load_tenants(directory: Path, *, max_limit: int | None = None,
                 parsed: ParsedFiles | None = None) -> dict[str, TenantConfig]:
    """Like read_tenants, but any problem is a ConfigError listing all of them."""
    return load_tenant_files(directory, max_limit=max_limit, parsed=parsed)[0]


def load_tenant_files(directory: Path, *, max_limit: int | None = None, parsed: ParsedFiles | None = None
                      ) -> tuple[dict[str, TenantConfig], dict[str, Path]]:
    """Like read_tenant_files, but any problem is a ConfigError listing all of them."""
    tenants, origins, problems = read_tenant_files(directory, max_limit=max_limit, parsed=parsed)
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"{len(problems)} problem(s) in tenant configuration:\n{listing}")
    return tenants, origins


def _limit_problems(tenant: TenantConfig, max_limit: int) -> list[tuple[str, str]]:
    """Limits no request could get: a search's limit is capped at GATEWAY_MAX_LIMIT, so a larger
    default would fail every search that does not name its own limit."""
    found = []
    configured = [(f"namespaces.{n}.collections.{c}.limit", cfg.limit)
                  for n, ns in tenant.namespaces.items() for c, cfg in ns.collections.items()]
    configured.append(("federation.limit", tenant.federation.limit))
    for key, value in configured:
        if value > max_limit:
            found.append((key, f"limit {value} is above GATEWAY_MAX_LIMIT {max_limit}; allowed: 1 to {max_limit} "
                               "(lower it, or raise GATEWAY_MAX_LIMIT)"))
    return found


# A number outside its range: pydantic names the bound, the message adds the value given.
_BOUNDS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def _problems(path: Path | str, exc: ValidationError) -> list[ConfigProblem]:
    found = []
    for error in exc.errors():
        loc = error["loc"]
        key = ".".join(str(part) for part in loc)
        message = error["msg"]
        if error["type"] == "enum" or error["type"] == "literal_error":
            message = f"{message}; got {error.get('input')!r}" + _suggestion(error.get("input"), allowed_values(loc))
        elif error["type"] == "missing":
            message = "required key is missing"
            values = allowed_values(loc)
            if values:
                message += f"; allowed: {', '.join(values)}"
        elif error["type"] == "extra_forbidden":
            keys = allowed_keys(loc[:-1])
            message = f"unknown key {str(loc[-1])!r} (value {error.get('input')!r})"
            if keys is not None:
                message += f"; allowed keys: {', '.join(keys)}" + _suggestion(str(loc[-1]), keys)
        elif error["type"] in _BOUNDS:
            message = f"{message}; got {error.get('input')!r}"
        elif error["type"] == "string_pattern_mismatch":
            message = f"{error.get('input')!r} is not a valid name: lowercase letters, digits, '-' and '_'"
        found.append(ConfigProblem(path, key, message))
    return found


def _suggestion(word: object, candidates: list[str] | None) -> str:
    if not isinstance(word, str) or not candidates:
        return ""
    match = nearest(word, candidates)
    return f"; did you mean {match!r}?" if match else ""
