import numpy as np, time
import lucid.ops.conv as C, sys
if len(sys.argv) > 1:
    C._scratch = lambda role, shape, dtype, zero=False: (np.zeros if zero else np.empty)(shape, dtype)
def t(name, f, n=30):
    f(); ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    print(f"{name:28s} {np.median(ts)*1e3:7.2f} ms")
rng=np.random.default_rng(0)
x1=rng.standard_normal((64,1,28,28)).astype(np.float32)
w1=rng.standard_normal((16,1,3,3)).astype(np.float32)
h=np.ascontiguousarray(rng.standard_normal((16,64,26,26)).astype(np.float32)).transpose(1,0,2,3)
w2=rng.standard_normal((32,16,3,3)).astype(np.float32)
g2=rng.standard_normal((64,32,24,24)).astype(np.float32)
g1=rng.standard_normal((64,16,26,26)).astype(np.float32)
P=((0,0),(0,0)); S=(1,1)
t("conv1 fwd", lambda: C._conv_impl(x1,w1,S,P,S,1))
t("conv2 fwd", lambda: C._conv_impl(h,w2,S,P,S,1))
t("conv2 weight", lambda: C._conv_weight_impl(h,g2,S,P,S,1,(3,3)))
t("conv1 weight", lambda: C._conv_weight_impl(x1,g1,S,P,S,1,(3,3)))
t("conv2 dx (transpose)", lambda: C._conv_transpose_impl(g2,w2,S,(0,0),S,1,(26,26)))
xc=C._padded_channel_major(h,P)
t("flat_cols conv2", lambda: C._flat_cols(xc,(3,3),S,(24,24)))
cols,st,L=C._flat_cols(xc,(3,3),S,(24,24))
t("matmul fwd conv2", lambda: np.matmul(w2.reshape(1,32,-1), cols.reshape(1,-1,64*L)))
gb=np.zeros((32,64,L),np.float32)
t("gb fill", lambda: C._grid(gb,(24,24),st).__setitem__(Ellipsis, C._channel_major(g2)))
t("matmul W", lambda: np.matmul(cols.reshape(1,144,-1), gb.reshape(1,32,-1).transpose(0,2,1)))
t("matmul W other", lambda: np.matmul(gb.reshape(1,32,-1), cols.reshape(1,144,-1).transpose(0,2,1)))
w2t=w2.reshape(1,32,-1).transpose(0,2,1)
t("matmul dx", lambda: np.matmul(w2t, gb.reshape(1,32,-1)))
t("matmul dx contig w", lambda: np.matmul(np.ascontiguousarray(w2t), gb.reshape(1,32,-1)))
t("matmul dx 2d", lambda: w2t[0] @ gb.reshape(32,-1))
cg=np.matmul(w2t, gb.reshape(1,32,-1)).reshape(16,9,64,L)
def col2im():
    y=np.zeros((16,64,676),np.float32)
    for j,sh in enumerate([0,1,2,26,27,28,52,53,54]): y[:,:,sh:sh+L]+=cg[:,j]
    return y
t("col2im", col2im)
t("relu-ish", lambda: np.maximum(g2,0))
