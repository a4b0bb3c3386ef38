/* The virtual device's clock and the prices it moves by (core.h includes
 * this: every part of the code reads mt_now through core): one cost model
 * for the emulation and meshplan (vclock.c). */
#ifndef MT_PRICE_H
#define MT_PRICE_H

/* ------------------------------------------------------------------ */
/* virtual time (the time-warp emulation's clock and prices)           */
/*
 * On the virtual device (train.device = virtual) every op of the op table
 * costs no arithmetic and moves this rank's clock on by its price, and
 * communication carries timestamps: a message or collective completes in
 * virtual time (comm: the virtual backend). The prices come from a hardware
 * profile's [cost] section (plan/cost.c loads it; the cost model prices
 * with the same functions below), so the emulation and meshplan share one
 * cost model: a matmul's FLOPs over the throughput the profile gives for
 * its size, elementwise bytes over the memory bandwidth, bytes over a
 * link's bandwidth plus its latency. */
#define MT_PRICE_MAX_GEMM 32
/* achievable matmul GFLOP/s by FLOPs per call: n points by increasing flops */
typedef struct {
  int n;
  double flops[MT_PRICE_MAX_GEMM], gflops[MT_PRICE_MAX_GEMM];
} mt_price_curve;
/* a matmul curve's index by the bytes of its operands' elements: 0 the
 * 2-byte types (bf16, fp16), 1 fp32 */
static inline int mt_price_width(double es) { return es >= 4.0 ? 1 : 0; }
typedef struct {
  mt_price_curve gemm[2];      /* the matmul curves, by mt_price_width */
  double elementwise_gbs;      /* memory bandwidth for elementwise work, GB/s */
  double act_bytes;            /* bytes of an activation element (2 or 4) */
  int devices_per_node;        /* ranks 0..n-1 form node 0, and so on */
  double intra_gbs, intra_us;  /* a link inside a node: bandwidth per rank, latency */
  double inter_gbs, inter_us;  /* ... across nodes */
  int attn_br, attn_bc;        /* block attention's tile: query rows x keys */
  double attn_gflops[2];       /* a fused kernel's rate on whole tiles, by mt_price_width
                                  (0: the matmul curve) */
  double overlap;              /* share of its rate a collective keeps beside compute */
  double stage_us;             /* a pipeline op's overhead beyond its compute */
  int coll_flat;               /* collectives across nodes flat, not hierarchical */
  /* a ring step's latency inside a node and across (us; 0: none), of the
   * protocol that carries large messages (ring_step_us) and of the one for
   * small messages at a quarter of the bandwidth (small_step_us; 0: none):
   * a pass of a ring of n ranks on N nodes takes n - N steps inside nodes
   * and N - 1 across (mt_price_coll_s) */
  double ring_step_us[2], small_step_us[2];
  int bytes_as_sent;           /* the run sends each message in its own dtype (a bf16 run):
                                  priced as counted, not rescaled by act_bytes */
} mt_price;
/* achievable GFLOP/s of a matmul of `flops` on operands of es bytes an
 * element: log-log interpolation between the points of that width's curve
 * (the other's where a hand-made price has one curve), flat beyond them;
 * es = 0, the higher of the two curves' (a bound for either width) */
double mt_price_gemm_gflops(const mt_price *p, double es, double flops);
/* Seconds of `calls` matmuls of m x n x k (2 m n k FLOPs each) on es-byte
 * operands: the FLOPs at the curve's rate for their size, or, where it is
 * longer, the operands and the product through memory once (es (m k + k n
 * + m n) bytes at the memory bandwidth): the curves are measured on
 * square matmuls, and a skinny one (few rows: a routed expert's share, a
 * short micro-batch) is bound by reading its weights, not by its FLOPs. */
double mt_price_gemm_s(const mt_price *p, double es, double m, double n, double k, double calls);
/* Seconds of block attention's forward for `heads` heads (B x NH) of hs
 * channels: queries at positions [q0, q0 + Tq) against keys at [k0, k0 +
 * Tk), causal or not, cut in blocks of attn_br query rows, each block
 * against the keys up to its last row (causal) in tiles of attn_bc keys,
 * two products a tile (S = Q K^T, P V: 4 hs FLOPs per query-key pair).
 * With attn_gflops (a fused kernel) every touched tile is computed whole,
 * at the rate of the es-byte width (es 0: the faster width's); without, each product covers the block's visible keys at
 * the es-byte matmul curve's rate for its size (the CPU backend). The backward is
 * 2.5 times this (it recomputes S and forms dP, dS, dQ, dK, dV: 5
 * products for 2). meshplan and the virtual device both price with it. */
double mt_price_attn_fwd_s(const mt_price *p, double es, double heads, long q0, int Tq, long k0,
                           int Tk, int causal, double hs);
/* seconds to move `bytes` through memory (elementwise work) */
double mt_price_elem_s(const mt_price *p, double bytes);
/* seconds to put `bytes` on a link inside a node (inside = 1) or across
 * nodes, one latency included */
double mt_price_link_s(const mt_price *p, int inside, double bytes);
/* Ranks of a group in one node: a group of `size` ranks `stride` apart
 * in world order, starting at a node's first rank (devices_per_node
 * consecutive ranks a node; none: one node). */
int mt_price_per_node(const mt_price *p, int stride, int size);
/* ... of a group whose rank q is world rank world0 + q stride: its ranks in
 * its first rank's node (all of them within one node) */
int mt_price_group_per_node(const mt_price *p, int world0, int stride, int size);
/* world ranks a and b in one node */
int mt_price_same_node(const mt_price *p, int a, int b);
/* Seconds of a collective over n ranks, k of them in each node (k >= n:
 * one node), that puts `bytes` on each rank's wire as comm counts them (a
 * ring's figures: 2 (n-1)/n of the tensor for an all-reduce, (n-1)/n for
 * the others). Across nodes it is priced hierarchically, as NCCL's rings
 * and trees run on nodes of k GPUs with a network link each: the part of
 * the ring inside a node over the intra-node link, the rest, 1/k of what a
 * flat ring would send, over every rank's own network link at once (of the
 * tensor's (n-1)/n: (k-1)/k inside, (N-1)/(N k) across N = n/k nodes); one
 * latency a level. An all-to-all (kind MT_PRICE_ALLTOALL) sends the share bound for
 * other nodes over the network link while the rest crosses the node beside
 * it. k = 1 is a flat ring across nodes, k >= n one inside a node; a
 * profile with coll_flat prices every group across nodes so. */
double mt_price_coll_s(const mt_price *p, double bytes, int n, int k, int kind);
/* its latency alone (a collective's calls beyond the first) */
double mt_price_coll_lat_s(const mt_price *p, int n, int k, int kind);
/* A collective's kind, for its steps (mt_price_coll_s's last argument):
 * one pass of a ring (an all-gather, a reduce-scatter: n - 1 steps), an
 * all-to-all (every pair at once: one step), an all-reduce (two passes of
 * the ring, or a tree's 2 (k - 1 + log2 N) steps where fewer). Beyond the
 * bytes and the levels' latencies above, a profile with ring step
 * latencies (ring_step_us, small_step_us) adds each step's: the protocol
 * for large messages at the full bandwidth, or the one for small messages
 * at a quarter of it, whichever is faster for the bytes (NCCL's Simple and
 * LL, as its tuning model prices them). */
enum { MT_PRICE_PASS = 0, MT_PRICE_ALLTOALL = 1, MT_PRICE_ALLREDUCE = 2 };

/* The rank's virtual clock: mt_vclock_start turns it on at 0 with the
 * prices (copied); from then on mt_now() reads it. */
void mt_vclock_start(const mt_price *p);
int mt_vclock_on(void);
const mt_price *mt_vclock_price(void);
/* the compute stream ran s seconds of ops */
void mt_vclock_advance(double s);
/* the seconds of ops run so far (the clock less its waits) */
double mt_vclock_busy(void);
/* the clock's whole state, to run another clock for a while (the cost
 * model prices a plan's ops on one) and put this one back */
typedef struct {
  int on;
  double now, busy; /* seconds since mt_vclock_start; of them, the ops' */
  mt_price price;
  long checks, violations;
} mt_vclock_state;
void mt_vclock_save(mt_vclock_state *s);
void mt_vclock_restore(const mt_vclock_state *s);
/* the stream waited for an event at virtual time t (no effect when the
 * clock is already past it) */
void mt_vclock_wait_until(double t);
/* causality checks (comm: a completion against its send's issue time);
 * a violation is counted, and named on stderr once */
void mt_vclock_check(double complete, double issued, const char *what);
long mt_vclock_checks(void);
long mt_vclock_violations(void);

#endif
