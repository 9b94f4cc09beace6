"""Print K x w grids from results_<T>.json."""
import json, os, sys
T = sys.argv[1]
r = json.load(open(f"{os.environ.get('LI_WORKDIR', 'data/late-interaction')}/results_{T}.json"))
def grid(fmt, rows, cols, label):
    print(f"-- {label} (tokens {T})")
    print("        " + " ".join(f"{c:>7}" for c in cols))
    for a in rows:
        print(f"{a:>7} " + " ".join(f"{r.get(fmt.format(a=a, c=c), {}).get('ndcg@10', float('nan')):7.4f}" for c in cols))
Ks = [10, 20, 30, 50, 100]
grid("mm(fused, maxsim) w={c} K={a}", Ks, [0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9], "min-max fused/MaxSim, rows K, cols w(MaxSim)")
grid("rrf(hybrid, maxsim) wm={c} K={a}", Ks, [0.5,1.0,1.5,2.0,3.0], "RRF k=60, rows K, cols MaxSim weight")
grid("maxsim q={c} K={a}", Ks, ["none d=none","both d=none","none d=both","both d=both","cls d=cls"], "MaxSim alone: query/doc [CLS]/[SEP]")
grid("fused + {c}*maxsim_mean K={a}", [20,30,50,100], [0.5,1,2,4,8], "fused + lam*mean MaxSim")
grid("dense top-{a} -> maxsim q={c}", Ks, ["none d=none","both d=both"], "dense top-K -> MaxSim")
grid("mm3(dense=0.3, bm25=0.4, maxsim={c}) K={a}", Ks, [0.3], "mm3 (0.3,0.4,0.3)")
