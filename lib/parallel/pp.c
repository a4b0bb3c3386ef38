/* Pipeline executor: runs one rank's op list (schedule.c) with non-blocking
 * point-to-point over the pp group, and the compute ops by driving the
 * model and the dp engine: a forward or backward op is a pass of the model
 * (mt_gpt_pass), each of its pieces run with its registry units acquired
 * from the dp engine before and released (and in backward reported
 * complete) after. Sends are MPI_Isend from copies in a pool of buffers,
 * never waited for before the end of the run (a wait on a send larger than
 * the eager limit blocks until the peer receives, and the peer may be
 * waiting for us); receives are posted and waited for in program order.
 * The validator's simulation is this executor with fixed op times, so a
 * list it accepts cannot deadlock here. */
#include "parallel/parallel.h"

#include <stdlib.h>
#include <string.h>

/* comm's point-to-point tags (NCCL gives each its own channel) */
enum { TAG_ACT = MT_TAG_PP_ACT, TAG_GRAD = MT_TAG_PP_GRAD };

/* the 4-byte words of n activation elements of the model's dtype */
static size_t msg_words(const mt_gpt *m, size_t n) { return (n * m->es + 3) / 4; }

void mt_pp_exec_create(mt_pp_exec *x, mt_group *pp_group, const mt_pp_schedule *s, mt_gpt *model,
                       mt_dp *dp, const int *l0, const int *l1) {
  memset(x, 0, sizeof *x);
  x->g = pp_group;
  x->model = model;
  x->dp = dp;
  x->ops = model->ops;
  x->rank = pp_group->rank;
  x->pp = s->pp;
  x->v = s->v;
  x->last_vs = s->pp * s->v - 1;
  int most = 0;
  for (int c = 0; c < s->v; c++) {
    int vs = x->vs[c] = mt_pp_vs_of(s, x->rank, c);
    x->l0[c] = l0[c];
    x->l1[c] = l1[c];
    size_t n = mt_gpt_acts_numel(model, l1[c] - l0[c], model->max_B, 0);
    if (n > x->set_numel) x->set_numel = n;
    if (vs == x->last_vs) x->head_numel = mt_gpt_head_acts_numel(model, model->max_B);
    if (l1[c] - l0[c] > most) most = l1[c] - l0[c];
  }
  /* a V's turn takes the next chunk's slot at the forward that feeds it,
   * maybe an op before the schedule counts it held: one spare */
  x->n_slots = s->max_inflight[x->rank] + (s->vshape ? 1 : 0);
  /* the V: this rank may run the head (last virtual stage) before the
   * embedding (the first) in another chunk */
  int has_first = 0, has_last = 0;
  for (int c = 0; c < s->v; c++) has_first |= x->vs[c] == 0, has_last |= x->vs[c] == x->last_vs;
  model->embed_head_apart = s->v > 1 && has_first && has_last;
  /* messages are the model's activations (mt_dtypes msgs = acts), sent as
   * 4-byte words: bf16 ones in half as many */
  x->overlap_dp = 1;
  x->max_msg = msg_words(model, mt_gpt_stage_msg_numel(model, model->max_B));
  x->slot_mem = mt_calloc((size_t)x->n_slots, sizeof(float *));
  x->acts = mt_calloc((size_t)x->n_slots, sizeof(mt_gpt_acts));
  x->slot_busy = mt_calloc((size_t)x->n_slots, sizeof(int));
  x->head_mem = mt_calloc((size_t)x->n_slots, sizeof(float *));
  x->head_busy = mt_calloc((size_t)x->n_slots, sizeof(int));
  x->head_of = mt_malloc((size_t)x->n_slots * sizeof(int));
  for (int i = 0; i < x->n_slots; i++) x->head_of[i] = -1;
  x->dout = mt_calloc((size_t)x->n_slots, sizeof(mt_act *));
  if (pp_group->size > 1)
    for (int i = 0; i < x->n_slots; i++)
      x->dout[i] = x->ops->alloc(MT_MEM_COMM, x->max_msg * sizeof(float));
  x->pieces = mt_calloc((size_t)most + 3, sizeof(mt_piece));
  x->cache_bytes = mt_gpt_slice_cache_bytes(model, most);
  if (x->cache_bytes) {
    x->cache_mem = mt_calloc((size_t)x->n_slots, sizeof(void *));
    x->cache_busy = mt_calloc((size_t)x->n_slots, sizeof(int));
  }
}

/* a free pool buffer of max_msg words for a send; its request's index in *kk */
static mt_act *send_buf(mt_pp_exec *x, int *kk) {
  int k = 0;
  for (; k < x->n_send; k++) {
    mt_progress(&x->send_req[k]);
    if (!x->send_req[k].active) break;
  }
  if (k == x->n_send) {
    if (x->n_send == x->cap_send) {
      x->cap_send = x->cap_send ? 2 * x->cap_send : 8;
      x->send_buf = realloc(x->send_buf, (size_t)x->cap_send * sizeof(float *));
      x->send_req = realloc(x->send_req, (size_t)x->cap_send * sizeof(mt_request));
      if (!x->send_buf || !x->send_req) mt_die("out of memory (pipeline send buffers)");
    }
    x->send_buf[k] = x->ops->alloc(MT_MEM_COMM, x->max_msg * sizeof(float));
    memset(&x->send_req[k], 0, sizeof(mt_request));
    x->n_send++;
  }
  *kk = k;
  return x->send_buf[k];
}

/* send n 4-byte words to peer from a pool buffer: the hidden state of
 * (slot, chunk) for rows rows (grad 0), or the model's input gradient
 * (grad 1), as the model packs a stage's message (the ladder residual: two
 * streams) */
static void send_msg(mt_pp_exec *x, int grad, int slot, int chunk, int rows, size_t n, int peer,
                     int tag) {
  int k;
  mt_act *buf = send_buf(x, &k);
  if (grad) mt_gpt_stage_pack_input_grad(x->model, rows, buf);
  else mt_gpt_stage_pack_output(x->model, &x->acts[slot], x->l0[chunk], x->l1[chunk], rows, buf);
  mt_isend(x->g, buf, n, MT_DT_F32, peer, tag, x->ops->loc, &x->send_req[k]);
}

void mt_pp_exec_destroy(mt_pp_exec *x) {
  for (int i = 0; i < x->n_slots; i++) {
    if (x->dout[i]) x->ops->free(MT_MEM_COMM, x->dout[i], x->max_msg * sizeof(float));
    if (x->slot_mem[i]) x->ops->free(MT_MEM_ACTIV, x->slot_mem[i], x->set_numel * sizeof(float));
    if (x->head_mem[i]) x->ops->free(MT_MEM_ACTIV, x->head_mem[i], x->head_numel * sizeof(float));
  }
  for (int i = 0; i < x->n_send; i++) {
    mt_wait(&x->send_req[i]);
    x->ops->free(MT_MEM_COMM, x->send_buf[i], x->max_msg * sizeof(float));
  }
  free(x->dout); free(x->send_buf); free(x->send_req);
  free(x->slot_mem); free(x->acts); free(x->slot_busy); free(x->pieces);
  free(x->head_mem); free(x->head_busy); free(x->head_of);
  for (int i = 0; x->cache_mem && i < x->n_slots; i++)
    if (x->cache_mem[i]) x->ops->free(MT_MEM_ACTIV, x->cache_mem[i], x->cache_bytes);
  free(x->cache_mem); free(x->cache_busy); free(x->sl_in); free(x->sl_tg);
  memset(x, 0, sizeof *x);
}

/* On the virtual device, a forward or backward op of a pipeline also costs
 * the profile's per-op overhead (stage_us: the op's dispatch and the send
 * and receive handshake beyond compute and message), as meshplan adds it
 * to each op of its schedule simulation. */
static void stage_overhead(const mt_pp_exec *x) {
  if (mt_vclock_on() && x->g->size > 1) mt_vclock_advance(mt_vclock_price()->stage_us * 1e-6);
}

/* wait for a request, counting the time as pipeline wait */
static void wait_req(mt_pp_exec *x, mt_request *r) {
  if (!r->active) return;
  double t0 = mt_now();
  mt_wait(r);
  x->wait_s += mt_now() - t0;
  if (mt_now() > t0) mt_trace_span("wait", "pipeline", MT_TRACK_PIPELINE, t0, mt_now(), -1, -1);
}

/* The head's entry for slot i, the lowest free one (memory at first use,
 * so a step allocates as many as its head passes hold at once), bound
 * into the slot's set. */
static void take_head(mt_pp_exec *x, int i) {
  int h = 0;
  while (h < x->n_slots && x->head_busy[h]) h++;
  if (h == x->n_slots) mt_die("pipeline rank %d: more head passes in flight than slots", x->rank);
  if (!x->head_mem[h]) x->head_mem[h] = x->ops->alloc(MT_MEM_ACTIV, x->head_numel * sizeof(float));
  x->head_busy[h] = 1;
  x->head_of[i] = h;
  int held = 0;
  for (int j = 0; j < x->n_slots; j++) held += x->head_busy[j];
  if (held > x->peak_heads) x->peak_heads = held;
  mt_gpt_head_acts_bind(x->model, &x->acts[i], x->head_mem[h], x->model->max_B);
}

/* The slot of (micro-batch, chunk) cell, taken at its first op: its
 * activation set bound for the chunk's layers (memory at first use), and
 * on the last virtual stage a head entry. */
static int take_slot(mt_pp_exec *x, int cell, int chunk) {
  if (x->slot_of[cell] >= 0) return x->slot_of[cell];
  for (int k = 0; k < x->n_slots; k++) {
    int i = (x->next_free_hint + k) % x->n_slots;
    if (x->slot_busy[i]) continue;
    x->slot_busy[i] = 1;
    x->slot_of[cell] = i;
    x->next_free_hint = (i + 1) % x->n_slots;
    int held = 0;
    for (int j = 0; j < x->n_slots; j++) held += x->slot_busy[j];
    if (held > x->peak_slots) x->peak_slots = held;
    if (!x->slot_mem[i])
      x->slot_mem[i] = x->ops->alloc(MT_MEM_ACTIV, x->set_numel * sizeof(float));
    mt_gpt_acts_bind(x->model, &x->acts[i], x->slot_mem[i], x->l1[chunk] - x->l0[chunk],
                     x->model->max_B, 0);
    if (x->vs[chunk] == x->last_vs) take_head(x, i);
    return i;
  }
  mt_die("pipeline rank %d: more than %d micro-batches in flight (schedule and slots disagree)",
         x->rank, x->n_slots);
}

/* slot_of keeps naming the slot for the micro-batch's send that follows
 * (the head's chunk sends nothing) */
static void release_slot(mt_pp_exec *x, int cell) {
  const int i = x->slot_of[cell];
  x->slot_busy[i] = 0;
  if (x->head_of[i] >= 0) x->head_busy[x->head_of[i]] = 0;
  x->head_of[i] = -1;
}

/* Token slices: the K|V cache of micro-batch mb on a chunk (key mb * v +
 * chunk), taken at its first slice's forward, and the model pointed at it
 * and at the unit's slice before a pass */
static void use_cache(mt_pp_exec *x, int unit, int chunk, int k) {
  const int key = unit / k * x->v + chunk;
  if (x->cache_of[key] < 0) {
    int i = 0;
    while (i < x->n_slots && x->cache_busy[i]) i++;
    if (i == x->n_slots)
      mt_die("pipeline rank %d: more than %d micro-batches' key/value caches in flight", x->rank,
             x->n_slots);
    if (!x->cache_mem[i]) x->cache_mem[i] = x->ops->alloc(MT_MEM_ACTIV, x->cache_bytes);
    x->cache_busy[i] = 1;
    x->cache_of[key] = i;
  }
  mt_gpt_set_slice(x->model, unit % k, x->cache_mem[x->cache_of[key]], x->l0[chunk]);
}

static void release_cache(mt_pp_exec *x, int unit, int chunk, int k) {
  const int key = unit / k * x->v + chunk;
  x->cache_busy[x->cache_of[key]] = 0;
  x->cache_of[key] = -1;
}

/* Token slices: the run's tokens cut slice by slice, (mb, slice, B, T/k),
 * so a unit's are contiguous as a pass reads them */
static void cut_slices(mt_pp_exec *x, const mt_pp_batch *b, int k) {
  const size_t Ts = (size_t)b->T / k, n = (size_t)b->n_mb * b->B * b->T;
  if (n > x->sl_cap) {
    free(x->sl_in);
    free(x->sl_tg);
    x->sl_in = mt_malloc(n * sizeof(int));
    x->sl_tg = mt_malloc(n * sizeof(int));
    x->sl_cap = n;
  }
  for (int mb = 0; mb < b->n_mb; mb++)
    for (int s = 0; s < k; s++)
      for (int r = 0; r < b->B; r++) {
        size_t to = (((size_t)mb * k + s) * b->B + r) * Ts;
        size_t from = ((size_t)(b->same_tokens ? 0 : mb) * b->B + r) * b->T + s * Ts;
        memcpy(x->sl_in + to, b->inputs + from, Ts * sizeof(int));
        memcpy(x->sl_tg + to, b->targets + from, Ts * sizeof(int));
      }
}

/* One pass of the model over a chunk for a micro-batch: each piece with its
 * registry units acquired from the dp engine (parameters, and in backward
 * gradients) before it runs, and after it the units whose gradients are
 * complete reported and those it no longer reads released. Returns the
 * forward's loss sum (0 but on the last virtual stage). */
static double run_pass(mt_pp_exec *x, mt_pass pass, int slot, int chunk, const mt_pp_batch *b,
                       int unit, int slices, const mt_act *dout, int input_only, int keep) {
  mt_gpt *m = x->model;
  const int vs = x->vs[chunk], mb = unit / slices;
  const int embed = vs == 0, head = vs == x->last_vs;
  const size_t off = b->same_tokens ? 0 : (size_t)mb * b->B * b->T;
  const size_t doff = b->same_tokens ? 0 : (size_t)mb * b->B * x->model->shape.seq_len;
  const mt_pass dp_pass = pass == MT_PASS_FORWARD ? MT_PASS_FORWARD : MT_PASS_BACKWARD;
  const int *in = b->inputs + off, *tg = b->targets + off;
  if (slices > 1) { /* the unit's slice (cut_slices), and the micro-batch's K|V cache */
    in = x->sl_in + (size_t)unit * b->B * (b->T / slices);
    tg = x->sl_tg + (size_t)unit * b->B * (b->T / slices);
    use_cache(x, unit, chunk, slices);
  }
  mt_pass_args args = {.a = &x->acts[slot], .l0 = x->l0[chunk], .l1 = x->l1[chunk],
                       .B = b->rows[mb], .inputs = in, .targets = tg,
                       .doc = b->doc ? b->doc + doff : NULL, .dout = dout, .dloss = b->dloss,
                       .input_only = input_only, .head = head};
  int n = mt_gpt_pass(m, pass, args.l0, args.l1, embed, head, x->pieces);
  mt_gpt_stage_documents(m, args.doc, args.B);
  double loss = 0.0;
  for (int i = 0; i < n; i++) {
    const mt_piece *p = &x->pieces[i];
    for (int k = 0; k < 2; k++) {
      if (p->use[k] < 0) continue;
      /* a weight pass reads activations and output gradients, never the
       * parameters (ZeRO-3 gathers nothing for it) */
      if (pass != MT_PASS_WEIGHT)
        mt_gpt_bind_params(m, p->use[k], mt_dp_params(x->dp, p->use[k], dp_pass));
      if (pass != MT_PASS_FORWARD) mt_gpt_bind_grads(m, p->use[k], mt_dp_grads(x->dp, p->use[k]));
    }
    loss += mt_gpt_run_piece(m, pass, p, &args);
    for (int k = 0; k < 2 && pass != MT_PASS_FORWARD; k++)
      if (p->use[k] >= 0) mt_dp_grads_pause(x->dp, p->use[k]);
    for (int k = 0; k < 2; k++)
      if (p->done[k] >= 0) mt_dp_grads_done(x->dp, p->done[k]);
    /* keep: the next op runs this chunk again (a run of micro-batches):
     * its units stay gathered */
    for (int k = 0; k < 2 && !keep; k++)
      if (p->release[k] >= 0) mt_dp_params_done(x->dp, p->release[k], dp_pass);
  }
  return loss;
}

/* what the model's groups counted so far: tp, cp, ep, etp (absent: 0) */
static void model_bytes(const mt_pp_exec *x, double out[4]) {
  const mt_gpt *m = x->model;
  const mt_group *g[4] = {m->tp.g, m->attn.g, m->moe.ep.ep_g, m->moe.ep.etp_g};
  for (int k = 0; k < 4; k++) out[k] = g[k] ? g[k]->bytes : 0.0;
}

/* a compute op's bytes on the model's groups, to its chunk */
static void add_chunk_bytes(mt_pp_exec *x, int chunk, const double before[4]) {
  double after[4];
  model_bytes(x, after);
  for (int k = 0; k < 4; k++) x->chunk_bytes[chunk][k] += after[k] - before[k];
}

/* A forward op: the chunk's pass; the last virtual stage adds the
 * micro-batch's mean loss as the model reports it (fp32), weighted by its
 * tokens in training and by its sequences in evaluation (its output stays
 * in the slot's set for the send: mt_gpt_stage_pack_output). */
static void forward_op(mt_pp_exec *x, int slot, int unit, int k, int chunk,
                       const mt_pp_batch *b, int keep) {
  const int last = x->vs[chunk] == x->last_vs, rows = b->rows[unit / k], T = x->model->T;
  double sum = run_pass(x, MT_PASS_FORWARD, slot, chunk, b, unit, k, NULL, 0, keep);
  if (last && rows > 0) { /* (token slices: a slice's mean is 1/k of a sequence's) */
    float mean = (float)(sum / ((double)rows * T));
    x->loss_sum += b->eval ? (double)mean * rows / k : (double)mean * rows * T;
  }
}

/* The V's turn (zb-v): where the next virtual stage (forward) or the
 * previous one (backward) is on this rank, the hidden state or its gradient
 * goes to that chunk's slot by copy, not by message. */
static void turn(mt_pp_exec *x, const mt_pp_schedule *s, const mt_pp_op *o, int forward,
                 int rows) {
  const int vs = x->vs[o->chunk], to = forward ? vs + 1 : vs - 1;
  if (to < 0 || to > x->last_vs || mt_pp_vs_rank(s, to) != x->rank) return;
  int c = 0;
  while (c < x->v && x->vs[c] != to) c++;
  const int cell = o->mb * x->v + c, k_from = x->slot_of[o->mb * x->v + o->chunk];
  if (forward) {
    int k = take_slot(x, cell, c);
    mt_gpt_stage_pack_output(x->model, &x->acts[k_from], x->l0[o->chunk], x->l1[o->chunk], rows,
                             x->acts[k].encoded);
  } else if (x->din) {
    mt_gpt_stage_pack_input_grad(x->model, rows, x->dout[x->slot_of[cell]]);
  }
}

double mt_pp_exec_run(mt_pp_exec *x, const mt_pp_schedule *s, const mt_pp_batch *b,
                      int forward_only) {
  const int v = s->v, r = x->rank;
  const double t_run = mt_now();
  x->wait_s = x->compute_s = 0.0;
  x->peak_slots = x->peak_heads = 0;
  x->loss_sum = 0.0;
  memset(x->chunk_bytes, 0, sizeof x->chunk_bytes);
  memset(x->chunk_s, 0, sizeof x->chunk_s);
  double b0[4];
  x->slot_of = mt_malloc((size_t)(s->m * v + 1) * sizeof(int));
  for (int i = 0; i < s->m * v; i++) x->slot_of[i] = -1;
  const int k = s->k > 1 ? s->k : 1;
  if ((k > 1) != (x->cache_bytes > 0))
    mt_die("pipeline rank %d: a schedule of %d token slices on a model of %d", r, k,
           x->model->attn.slices);
  if (k > 1) {
    cut_slices(x, b, k);
    x->cache_of = mt_malloc((size_t)(b->n_mb * v + 1) * sizeof(int));
    for (int i = 0; i < b->n_mb * v; i++) x->cache_of[i] = -1;
    for (int i = 0; i < x->n_slots; i++) x->cache_busy[i] = 0;
  }
  /* per chunk, the op that completes its gradients for the last time in
   * this run (the last backward, or with a split backward the last weight
   * pass): from there on the dp engine reduces each unit's gradients as
   * soon as they are complete, overlapped with the rest of this rank's
   * backward and the cool-down of the stages below */
  int last_done[MT_PP_MAX_CHUNKS];
  for (int c = 0; c < v; c++) last_done[c] = -1;
  for (int i = 0; !forward_only && i < s->n_ops[r]; i++) {
    mt_pp_op_kind kd = s->ops[r][i].kind;
    int completes = x->model->split_backward ? kd == MT_PP_BWD || kd == MT_PP_BWD_WEIGHT
                                             : kd == MT_PP_BWD || kd == MT_PP_BWD_INPUT;
    if (completes) last_done[s->ops[r][i].chunk] = i;
  }
  /* breadth-first: runs of compute ops of one kind on one chunk; in_run[i]:
   * the next compute op after op i continues op i's run */
  char *in_run = mt_calloc((size_t)s->n_ops[r] + 1, 1);
  if (s->kind == MT_SCHED_BFS && x->dp->unit_bufs + x->dp->open_fills > 0)
    for (int i = 0, lc = -1; i < s->n_ops[r]; i++) {
      mt_pp_op_kind kd = s->ops[r][i].kind;
      if (kd != MT_PP_FWD && kd != MT_PP_BWD) continue;
      if (lc >= 0 && s->ops[r][lc].kind == kd && s->ops[r][lc].chunk == s->ops[r][i].chunk)
        in_run[lc] = 1;
      lc = i;
    }
  /* every run takes the slots in the same order, so the slots a run
   * touches (allocated at first use) are those of the plan's one step */
  for (int i = 0; i < x->n_slots; i++) x->slot_busy[i] = x->head_busy[i] = 0, x->head_of[i] = -1;
  x->next_free_hint = 0;
  for (int i = 0; i < s->n_ops[r]; i++) {
    const mt_pp_op *o = &s->ops[r][i];
    const int cell = o->mb * v + o->chunk;
    const int rows = b->rows[o->mb / k];
    const size_t n = msg_words(x->model, mt_gpt_stage_msg_numel(x->model, rows));
    double t0;
    int slot;
    switch (o->kind) {
    case MT_PP_RECV_ACT:
      slot = take_slot(x, cell, o->chunk);
      mt_irecv(x->g, x->acts[slot].encoded, n, MT_DT_F32, mt_pp_vs_rank(s, x->vs[o->chunk] - 1),
               TAG_ACT, x->ops->loc, &x->recv);
      wait_req(x, &x->recv);
      break;
    case MT_PP_FWD:
      slot = take_slot(x, cell, o->chunk);
      t0 = mt_now();
      mt_comm_rec_mark(MT_REC_OP_BEGIN, i, (int)o->kind);
      model_bytes(x, b0);
      forward_op(x, slot, o->mb, k, o->chunk, b, in_run[i]);
      stage_overhead(x);
      mt_comm_rec_mark(MT_REC_OP_END, i, (int)o->kind);
      add_chunk_bytes(x, o->chunk, b0);
      x->compute_s += mt_now() - t0;
      x->chunk_s[o->chunk][0] += mt_now() - t0;
      mt_trace_span("forward", "pipeline", MT_TRACK_PIPELINE, t0, mt_now(), o->mb, o->chunk);
      turn(x, s, o, 1, rows);
      if (forward_only) release_slot(x, cell);
      if (forward_only && k > 1 && o->mb % k == k - 1) release_cache(x, o->mb, o->chunk, k);
      break;
    case MT_PP_SEND_ACT:
      slot = x->slot_of[cell];
      t0 = mt_now();
      send_msg(x, 0, slot, o->chunk, rows, n, mt_pp_vs_rank(s, x->vs[o->chunk] + 1), TAG_ACT);
      x->wait_s += mt_now() - t0;
      break;
    case MT_PP_RECV_GRAD:
      if (forward_only) break;
      slot = x->slot_of[cell];
      mt_irecv(x->g, x->dout[slot], n, MT_DT_F32, mt_pp_vs_rank(s, x->vs[o->chunk] + 1), TAG_GRAD,
               x->ops->loc, &x->recv);
      wait_req(x, &x->recv);
      break;
    case MT_PP_BWD:
    case MT_PP_BWD_INPUT: {
      if (forward_only) break;
      slot = x->slot_of[cell];
      const int last_vs = x->vs[o->chunk] == x->last_vs, first_vs = x->vs[o->chunk] == 0;
      mt_dp_reduce_during_backward(x->dp, x->overlap_dp && i == last_done[o->chunk]);
      t0 = mt_now();
      mt_comm_rec_mark(MT_REC_OP_BEGIN, i, (int)o->kind);
      model_bytes(x, b0);
      int input_only = o->kind == MT_PP_BWD_INPUT && x->model->split_backward;
      /* a run's gradients are reduced once, after its last micro-batch */
      mt_dp_defer_reduce(x->dp, in_run[i]);
      run_pass(x, MT_PASS_BACKWARD, slot, o->chunk, b, o->mb, k, last_vs ? NULL : x->dout[slot],
               input_only, in_run[i]);
      mt_dp_defer_reduce(x->dp, 0);
      stage_overhead(x);
      mt_comm_rec_mark(MT_REC_OP_END, i, (int)o->kind);
      add_chunk_bytes(x, o->chunk, b0);
      x->din = first_vs ? NULL : mt_gpt_input_grad(x->model);
      x->compute_s += mt_now() - t0;
      x->chunk_s[o->chunk][1] += mt_now() - t0;
      mt_trace_span(input_only ? "backward-input" : "backward", "pipeline", MT_TRACK_PIPELINE,
                    t0, mt_now(), o->mb, o->chunk);
      turn(x, s, o, 0, rows);
      if (o->kind == MT_PP_BWD) release_slot(x, cell);
      if (k > 1 && o->mb % k == 0) release_cache(x, o->mb, o->chunk, k); /* the last slice */
      break;
    }
    case MT_PP_BWD_WEIGHT:
      if (forward_only) break;
      /* the weight gradients, from what the slot kept since BWD_INPUT (a
       * model without a split backward did all of it there) */
      if (x->model->split_backward) {
        mt_dp_reduce_during_backward(x->dp, x->overlap_dp && i == last_done[o->chunk]);
        slot = x->slot_of[cell];
        t0 = mt_now();
        mt_comm_rec_mark(MT_REC_OP_BEGIN, i, (int)o->kind);
        model_bytes(x, b0);
        run_pass(x, MT_PASS_WEIGHT, slot, o->chunk, b, o->mb, k, NULL, 0, 0);
        mt_comm_rec_mark(MT_REC_OP_END, i, (int)o->kind);
        add_chunk_bytes(x, o->chunk, b0);
        x->compute_s += mt_now() - t0;
        x->chunk_s[o->chunk][2] += mt_now() - t0;
        mt_trace_span("backward-weight", "pipeline", MT_TRACK_PIPELINE, t0, mt_now(), o->mb,
                      o->chunk);
      }
      release_slot(x, cell);
      break;
    case MT_PP_SEND_GRAD:
      if (forward_only) break;
      /* right after its backward: the input gradient is still in the model's scratch */
      t0 = mt_now();
      send_msg(x, 1, -1, o->chunk, rows, n, mt_pp_vs_rank(s, x->vs[o->chunk] - 1), TAG_GRAD);
      x->wait_s += mt_now() - t0;
      break;
    case MT_PP_NKINDS:
      break;
    }
  }
  for (int i = 0; i < x->n_send; i++) wait_req(x, &x->send_req[i]);
  free(x->slot_of);
  free(x->cache_of);
  free(in_run);
  x->slot_of = x->cache_of = NULL;
  x->wall_s = mt_now() - t_run;
  return x->loss_sum;
}

/* ------------------------------------------------------------------ */
/* tied tensors across stages                                          */

enum { TAG_TIED = MT_TAG_PP_TIED };

size_t mt_pp_tied_numel(const mt_registry *reg) {
  size_t most = 0;
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->pp_copy >= 0 && t->pp_copy != t->pp_stage && t->numel_local > most)
      most = t->numel_local;
  }
  return most;
}

void mt_pp_sum_tied_grads(mt_group *pp_group, const mt_registry *reg, const mt_ops *ops,
                          mt_dp *dp, float *scratch) {
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->pp_copy < 0 || t->pp_copy == t->pp_stage || t->numel_local == 0) continue;
    int peer = reg->pp_rank == t->pp_stage ? t->pp_copy : t->pp_stage;
    void *g = mt_dp_grads_at(dp, t->offset);
    if (dp->gdt != MT_DT_F32) { /* bf16 gradients: both widened, added in fp32, rounded
                                 * once (the same bits at both ends: fp32 addition commutes) */
      float *mine = scratch + t->numel_local;
      ops->convert(mine, MT_DT_F32, g, dp->gdt, t->numel_local);
      mt_sendrecv(pp_group, mine, scratch, t->numel_local, MT_DT_F32, peer, TAG_TIED, ops->loc);
      ops->axpy(MT_DT_F32, mine, 1.0f, scratch, t->numel_local);
      ops->convert(g, dp->gdt, mine, MT_DT_F32, t->numel_local);
      continue;
    }
    mt_sendrecv(pp_group, g, scratch, t->numel_local, MT_DT_F32, peer, TAG_TIED, ops->loc);
    ops->axpy(MT_DT_F32, g, 1.0f, scratch, t->numel_local);
  }
}
