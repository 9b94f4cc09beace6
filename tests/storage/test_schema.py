"""Physical names and layouts: where a scope's rows live, and the keys they are stored under."""

from gateway.storage.schema import Isolation, Layout, Scope, physical_name, shared_name


def test_isolated_scopes_keep_their_own_names_and_keys():
    scope = Scope("acme", "support", "docs")
    where = Layout().physical(scope)
    assert (where.chunks, where.parents) == (physical_name(scope, "c"), physical_name(scope, "p"))
    assert not where.shared and where.row_key("support/a/0") == where.logical_key("support/a/0") == "support/a/0"


def test_partition_key_tenants_share_one_pair_per_namespace_and_collection():
    layout = Layout.of([("acme", Isolation.PARTITION_KEY), ("globex", Isolation.PARTITION_KEY),
                        ("initech", Isolation.COLLECTION)])
    assert layout.shared_tenants == frozenset({"acme", "globex"})
    acme, globex = layout.physical(Scope("acme", "support", "docs")), layout.physical(Scope("globex", "support", "docs"))
    assert acme.chunks == globex.chunks == shared_name("support", "docs", "c")
    assert acme.chunks.startswith("gw_cs_support__docs_") and acme.parents.startswith("gw_ps_support__docs_")
    assert layout.physical(Scope("acme", "support", "tickets")).chunks != acme.chunks
    assert not layout.physical(Scope("initech", "support", "docs")).shared


def test_shared_keys_carry_the_tenant_and_come_back_whole():
    where = Layout(frozenset({"acme"})).physical(Scope("acme", "support", "docs"))
    assert where.row_key("support/a/b/0") == "acme/support/a/b/0"
    assert where.logical_key("acme/support/a/b/0") == "support/a/b/0"


def test_shared_names_never_collide_with_a_tenant_named_like_a_namespace():
    # gw_c_ (per tenant) and gw_cs_ (shared) are distinct prefixes whatever the names.
    assert shared_name("a", "b", "c") != physical_name(Scope("s", "a", "b"), "c")
    assert shared_name("a__b", "c", "c") != shared_name("a", "b__c", "c")  # the hash keeps them apart


def test_collection_names_are_stable_and_the_same_on_every_call():
    # Stored collections are found by these names: memoizing them must not change one.
    scope = Scope("acme", "docs", "tickets v2")
    assert physical_name(scope, "c") == "gw_c_acme__docs__tickets_v2_d7b201c20cd8"
    assert physical_name(Scope("acme", "docs", "tickets v2"), "c") == physical_name(scope, "c")
    assert scope.parent_collection == physical_name(scope, "p") != scope.chunk_collection
    assert shared_name("docs", "tickets", "p") == "gw_ps_docs__tickets_90ef441a67fb"
