/* gpu-emu: NCCL over MPI on host memory, with NCCL's stream ordering.
 *
 * A communicator is an MPI communicator of its ranks in NCCL rank order,
 * made from the unique id: ncclGetUniqueId writes its caller's world rank
 * and a serial number into the id, every other member registers with that
 * rank (MPI point-to-point on MPI_COMM_WORLD), which answers with the
 * member list, and MPI_Comm_create_group makes the communicator among the
 * members only. The communicators of one ncclGroupStart/End are made
 * together: registrations first, then the creations in one order every
 * rank agrees on (creator, serial), so no order of the calls can deadlock.
 *
 * An operation is queued on its stream like any other (after the work
 * queued before it) and starts when it reaches the head: the matching
 * non-blocking MPI call (MPI_Iallreduce, MPI_Iallgather,
 * MPI_Ireduce_scatter_block, MPI_Ibcast; ncclSend as MPI_Issend, which
 * completes only once the receive is posted, as NCCL's rendezvous). The
 * stream moves on when MPI reports it complete. The operations of one group
 * form one stream operation per stream, started together. MPI's matching
 * gives NCCL's: collectives in call order per communicator, point-to-point
 * in call order per peer and direction; a receive of another size than the
 * send it matches is an error. Buffers must be device ranges of the sizes
 * the call implies. Reductions over bf16 (sum, prod, max, min) are MPI
 * user operations on 16-bit words: each operation of two values in fp32,
 * rounded to bf16 (to nearest even), as NCCL's bf16 kernels round each
 * partial result; the order of the additions is MPI's, not NCCL's.
 * MT_EMU_NCCL_INFLIGHT=n lets only n groups run at once on the device,
 * started in the order they were issued (real NCCL kernels
 * occupy the GPU while they wait for their peers: more of them than fit
 * can deadlock, and the order they were issued in then matters).
 * Not modelled: NCCL's algorithms, channels and their memory, timing. */
#include "runtime.h"

#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>

struct ncclComm {
  MPI_Comm mpi;
  int nranks, rank;
  int creator, serial; /* the id */
  int device;
};

namespace {

using namespace mt_emu;

const char ID_MAGIC[8] = {'m', 't', 'e', 'm', 'u', 'n', 'c', '\0'};
const int TAG_BASE = 24000; /* registrations and member lists on MPI_COMM_WORLD */
const int TAG_P2P = 7;      /* point-to-point on a communicator */

struct id_fields {
  char magic[8];
  int creator, serial;
};

int g_serial;
int g_group_depth;
std::string g_last_error;

struct pending_init {
  ncclComm_t *out;
  int nranks, rank;
  id_fields id;
};
std::vector<pending_init> g_inits;

enum task_kind { T_ALLREDUCE, T_ALLGATHER, T_REDUCE_SCATTER, T_BROADCAST, T_SEND, T_RECV };
const char *task_name(task_kind k) {
  const char *n[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
                     "ncclSend", "ncclRecv"};
  return n[k];
}

struct task {
  task_kind kind;
  ncclComm_t comm;
  const void *send;
  void *recv;
  size_t count; /* elements, as the call counts them */
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer; /* send, recv: the peer; broadcast: the root */
  call_site at;
};

/* The calls of one ncclGroupStart/End (or one call alone): one unit, with a
 * part queued on each stream it uses; it starts when every part has reached
 * the head of its stream (and MT_EMU_NCCL_INFLIGHT leaves room), and every
 * part completes with it. */
struct group_op {
  std::vector<task> tasks;
  std::vector<MPI_Request> reqs;
  std::vector<int> recv_of; /* per request: the task whose received size is checked, or -1 */
  std::vector<std::vector<char>> temps;
  std::vector<std::pair<cudaStream_t, uint64_t>> parts; /* each part's stream and op id */
  bool started, finished;
};
int g_inflight;                                /* groups started and not finished */
std::vector<std::shared_ptr<group_op>> g_waiting; /* not started, in issue order */
std::vector<std::pair<cudaStream_t, task>> g_grouped; /* in call order */

int check_mpi(int rc, const char *what, const call_site &at) {
  if (rc == MPI_SUCCESS) return rc;
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  fatal_at(at.file, at.line, "gpu-emu NCCL: %s failed: %s", what, s);
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

MPI_Datatype mpi_type(ncclDataType_t t, const call_site &at) {
  switch (t) {
  case ncclInt8: return MPI_SIGNED_CHAR;
  case ncclUint8: return MPI_UNSIGNED_CHAR;
  case ncclInt32: return MPI_INT;
  case ncclUint32: return MPI_UNSIGNED;
  case ncclInt64: return MPI_INT64_T;
  case ncclUint64: return MPI_UINT64_T;
  case ncclFloat32: return MPI_FLOAT;
  case ncclFloat64: return MPI_DOUBLE;
  case ncclBfloat16: return MPI_UINT16_T; /* with the bf16 operations below */
  default: fatal_at(at.file, at.line, "gpu-emu NCCL: reductions over data type %d are not modelled", (int)t);
  }
}

/* bf16 as the upper half of an fp32; fp32 to bf16 rounded to nearest even
 * (a NaN stays a quiet NaN) */
float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
uint16_t bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* inout[i] = round(in[i] op inout[i]), the operation in fp32 */
template <ncclRedOp_t OP>
void bf16_reduce(void *in, void *inout, int *len, MPI_Datatype *) {
  const uint16_t *a = (const uint16_t *)in;
  uint16_t *b = (uint16_t *)inout;
  for (int i = 0; i < *len; i++) {
    float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    float r = OP == ncclSum ? x + y : OP == ncclProd ? x * y : OP == ncclMax ? std::max(x, y)
                                                                            : std::min(x, y);
    b[i] = bf16_from_f32(r);
  }
}

/* the bf16 form of op: an MPI user operation, made once */
MPI_Op bf16_op(ncclRedOp_t op, const call_site &at) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_User_function *fns[4] = {bf16_reduce<ncclSum>, bf16_reduce<ncclProd>, bf16_reduce<ncclMax>,
                               bf16_reduce<ncclMin>};
  int k = op == ncclSum ? 0 : op == ncclProd ? 1 : op == ncclMax ? 2 : op == ncclMin ? 3 : -1;
  if (k < 0) fatal_at(at.file, at.line, "gpu-emu NCCL: reduction %d is not modelled", (int)op);
  if (ops[k] == MPI_OP_NULL) check_mpi(MPI_Op_create(fns[k], 1, &ops[k]), "MPI_Op_create", at);
  return ops[k];
}

MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t t, const call_site &at) {
  if (t == ncclBfloat16) return bf16_op(op, at);
  switch (op) {
  case ncclSum: return MPI_SUM;
  case ncclProd: return MPI_PROD;
  case ncclMax: return MPI_MAX;
  case ncclMin: return MPI_MIN;
  default: fatal_at(at.file, at.line, "gpu-emu NCCL: reduction %d is not modelled", (int)op);
  }
}

std::string describe(const task &t) {
  char b[256];
  snprintf(b, sizeof b, "%s of %zu elements on communicator %d.%d (rank %d of %d%s) from %s:%d",
           task_name(t.kind), t.count, t.comm->creator, t.comm->serial, t.comm->rank,
           t.comm->nranks,
           t.kind == T_SEND ? ", to peer" : t.kind == T_RECV ? ", from peer" : "",
           t.at.file ? t.at.file : "?", t.at.line);
  std::string s = b;
  if (t.kind == T_SEND || t.kind == T_RECV) s += " " + std::to_string(t.peer);
  return s;
}

/* the buffers a call touches, checked when it is made */
void check_buffers(const task &t) {
  size_t es = type_bytes(t.type);
  if (!es) fatal_at(t.at.file, t.at.line, "%s: unknown data type %d", task_name(t.kind), (int)t.type);
  size_t n = t.count * es, N = n * (size_t)t.comm->nranks;
  char what[96];
  auto chk = [&](const char *side, const void *p, size_t bytes) {
    snprintf(what, sizeof what, "%s %s", task_name(t.kind), side);
    check_device_range(t.at.file, t.at.line, what, p, bytes);
  };
  switch (t.kind) {
  case T_ALLREDUCE: chk("sendbuff", t.send, n), chk("recvbuff", t.recv, n); break;
  case T_ALLGATHER: chk("sendbuff", t.send, n), chk("recvbuff", t.recv, N); break;
  case T_REDUCE_SCATTER: chk("sendbuff", t.send, N), chk("recvbuff", t.recv, n); break;
  case T_BROADCAST:
    if (t.comm->rank == t.peer) chk("sendbuff", t.send, n);
    chk("recvbuff", t.recv, n);
    break;
  case T_SEND: chk("sendbuff", t.send, n); break;
  case T_RECV: chk("recvbuff", t.recv, n); break;
  }
  if ((t.kind == T_SEND || t.kind == T_RECV || t.kind == T_BROADCAST) &&
      (t.peer < 0 || t.peer >= t.comm->nranks))
    fatal_at(t.at.file, t.at.line, "%s: peer %d of a %d-rank communicator", task_name(t.kind),
             t.peer, t.comm->nranks);
}

void start(group_op &g) {
  for (size_t i = 0; i < g.tasks.size(); i++) {
    const task &t = g.tasks[i];
    const call_site &at = t.at;
    MPI_Comm c = t.comm->mpi;
    size_t es = type_bytes(t.type), n = t.count * es;
    int cnt = (int)t.count;
    if (t.count > 0x7fffffff) fatal_at(at.file, at.line, "%s of %zu elements", task_name(t.kind), t.count);
    MPI_Request r = MPI_REQUEST_NULL;
    int recv_task = -1;
    switch (t.kind) {
    case T_ALLREDUCE:
      check_mpi(MPI_Iallreduce(t.send == t.recv ? MPI_IN_PLACE : t.send, t.recv, cnt,
                               mpi_type(t.type, at), mpi_op(t.op, t.type, at), c, &r),
                "MPI_Iallreduce", at);
      break;
    case T_ALLGATHER: {
      bool inplace = (const char *)t.send == (const char *)t.recv + (size_t)t.comm->rank * n;
      check_mpi(MPI_Iallgather(inplace ? MPI_IN_PLACE : t.send, (int)n, MPI_BYTE, t.recv, (int)n,
                               MPI_BYTE, c, &r),
                "MPI_Iallgather", at);
      break;
    }
    case T_REDUCE_SCATTER: {
      /* the input may overlap the output (in place): reduce from a copy */
      size_t N = n * (size_t)t.comm->nranks;
      g.temps.emplace_back((const char *)t.send, (const char *)t.send + N);
      check_mpi(MPI_Ireduce_scatter_block(g.temps.back().data(), t.recv, cnt, mpi_type(t.type, at),
                                          mpi_op(t.op, t.type, at), c, &r),
                "MPI_Ireduce_scatter_block", at);
      break;
    }
    case T_BROADCAST:
      if (t.comm->rank == t.peer && t.send != t.recv) memmove(t.recv, t.send, n);
      check_mpi(MPI_Ibcast(t.recv, (int)n, MPI_BYTE, t.peer, c, &r), "MPI_Ibcast", at);
      break;
    case T_SEND:
      check_mpi(MPI_Issend(t.send, (int)n, MPI_BYTE, t.peer, TAG_P2P, c, &r), "MPI_Issend", at);
      break;
    case T_RECV:
      check_mpi(MPI_Irecv(t.recv, (int)n, MPI_BYTE, t.peer, TAG_P2P, c, &r), "MPI_Irecv", at);
      recv_task = (int)i;
      break;
    }
    g.reqs.push_back(r);
    g.recv_of.push_back(recv_task);
    stats.nccl_ops++;
  }
}

bool done(group_op &g) {
  int flag = 0;
  std::vector<MPI_Status> st(g.reqs.size());
  int rc = MPI_Testall((int)g.reqs.size(), g.reqs.data(), &flag, st.data());
  if (rc != MPI_SUCCESS) {
    for (size_t i = 0; i < st.size(); i++)
      if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING) {
        const task &t = g.tasks[i];
        if (st[i].MPI_ERROR == MPI_ERR_TRUNCATE)
          fatal_at(t.at.file, t.at.line,
                   "%s: a longer message arrived than the %zu elements received (an ncclSend "
                   "and its ncclRecv differ in size)",
                   describe(t).c_str(), t.count);
        check_mpi(st[i].MPI_ERROR, task_name(t.kind), t.at);
      }
    check_mpi(rc, "MPI_Testall", g.tasks[0].at);
  }
  if (!flag) return false;
  for (size_t i = 0; i < g.reqs.size(); i++) {
    if (g.recv_of[i] < 0) continue;
    const task &t = g.tasks[(size_t)g.recv_of[i]];
    int got = 0;
    MPI_Get_count(&st[i], MPI_BYTE, &got);
    if ((size_t)got != t.count * type_bytes(t.type))
      fatal_at(t.at.file, t.at.line,
               "%s: the matching ncclSend carried %d bytes, the receive expects %zu (NCCL "
               "pairs sends and receives by order: they must agree in size)",
               describe(t).c_str(), got, t.count * type_bytes(t.type));
  }
  return true;
}

/* a group can start when each of its parts is at the head of its stream */
bool ready(const group_op &g) {
  for (auto &p : g.parts)
    if (head_id(p.first) != p.second) return false;
  return true;
}

/* Starts the groups that are ready. Without a limit, any of them (every
 * NCCL kernel fits on the GPU). Under MT_EMU_NCCL_INFLIGHT, strictly in
 * the order they were issued, as far as the limit leaves room: a group not
 * yet ready holds back every later one. That is the pessimistic GPU (its
 * resources taken by the kernels issued first), and a deterministic one:
 * a program passes it only if no rank can wait on an operation that a
 * peer issues after one that waits on this rank. */
void start_ready() {
  const bool fifo = cfg().nccl_inflight > 0;
  for (size_t i = 0; i < g_waiting.size();) {
    if (fifo && g_inflight >= cfg().nccl_inflight) return;
    group_op &g = *g_waiting[i];
    if (!ready(g)) {
      if (fifo) return;
      i++;
      continue;
    }
    g.started = true;
    g_inflight++;
    start(g);
    g_waiting.erase(g_waiting.begin() + (long)i);
  }
}

/* the group's parts, one per stream (in the order the streams first appear) */
void submit(std::vector<std::pair<cudaStream_t, task>> &&calls) {
  auto g = std::make_shared<group_op>();
  std::vector<cudaStream_t> streams;
  for (auto &c : calls) {
    g->tasks.push_back(c.second);
    if (std::find(streams.begin(), streams.end(), c.first) == streams.end())
      streams.push_back(c.first);
  }
  g_waiting.push_back(g);
  for (cudaStream_t s : streams) {
    op o{};
    o.kind = op::ASYNC;
    o.what = task_name(g->tasks[0].kind);
    o.start = [g]() {
      if (!g->started) start_ready();
      return g->started;
    };
    o.done = [g]() {
      if (!g->finished && done(*g)) {
        g->finished = true;
        g_inflight--;
      }
      return g->finished;
    };
    o.describe = [g]() {
      std::string d = g->parts.size() > 1
                          ? "a group over " + std::to_string(g->parts.size()) + " streams: "
                          : "";
      for (size_t i = 0; i < g->tasks.size(); i++) d += (i ? "; " : "") + describe(g->tasks[i]);
      return d;
    };
    /* the id is known once queued; until all parts are, the group cannot
     * be ready (a part's id is 0) */
    g->parts.emplace_back(s, 0);
    uint64_t id = enqueue(s, std::move(o));
    for (auto &p : g->parts)
      if (p.first == s && !p.second) p.second = id;
  }
  start_ready();
}

ncclResult_t add(task &&t, cudaStream_t s) {
  if (!t.comm) fatal_at(t.at.file, t.at.line, "%s on a NULL communicator", task_name(t.kind));
  check_buffers(t);
  std::vector<std::pair<cudaStream_t, task>> one(1, std::make_pair(s, t));
  if (g_group_depth) g_grouped.push_back(one[0]);
  else submit(std::move(one));
  return ncclSuccess;
}

/* Makes the communicators of inits, in three steps no order of calls can
 * deadlock (see above). */
void make_comms(std::vector<pending_init> &inits) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  call_site at{nullptr, 0};
  std::vector<MPI_Request> reqs;
  std::vector<std::vector<int>> members(inits.size());
  std::vector<int> reg(2 * inits.size());
  for (size_t i = 0; i < inits.size(); i++) {
    const pending_init &p = inits[i];
    if (p.nranks < 1 || p.rank < 0 || p.rank >= p.nranks)
      fatal("ncclCommInitRank: rank %d of %d", p.rank, p.nranks);
    members[i].assign((size_t)p.nranks, -1);
    if (p.id.creator == me) continue;
    reg[2 * i] = p.rank;
    reg[2 * i + 1] = me;
    MPI_Request r;
    check_mpi(MPI_Isend(&reg[2 * i], 2, MPI_INT, p.id.creator, TAG_BASE + p.id.serial % 4000,
                        MPI_COMM_WORLD, &r), "MPI_Isend (registration)", at);
    reqs.push_back(r);
  }
  for (size_t i = 0; i < inits.size(); i++) {
    const pending_init &p = inits[i];
    if (p.id.creator != me) continue;
    members[i][(size_t)p.rank] = me;
    for (int k = 1; k < p.nranks; k++) {
      int got[2];
      check_mpi(MPI_Recv(got, 2, MPI_INT, MPI_ANY_SOURCE, TAG_BASE + p.id.serial % 4000,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (registration)", at);
      if (got[0] < 0 || got[0] >= p.nranks || members[i][(size_t)got[0]] >= 0)
        fatal("ncclCommInitRank: NCCL rank %d registered twice or out of range (%d ranks)", got[0],
              p.nranks);
      members[i][(size_t)got[0]] = got[1];
    }
    for (int k = 0; k < p.nranks; k++)
      if (members[i][(size_t)k] != me) {
        MPI_Request r;
        check_mpi(MPI_Isend(members[i].data(), p.nranks, MPI_INT, members[i][(size_t)k],
                            TAG_BASE + 4000 + p.id.serial % 4000, MPI_COMM_WORLD, &r),
                  "MPI_Isend (members)", at);
        reqs.push_back(r);
      }
  }
  for (size_t i = 0; i < inits.size(); i++) {
    const pending_init &p = inits[i];
    if (p.id.creator == me) continue;
    check_mpi(MPI_Recv(members[i].data(), p.nranks, MPI_INT, p.id.creator,
                       TAG_BASE + 4000 + p.id.serial % 4000, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Recv (members)", at);
  }
  check_mpi(MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall", at);
  std::vector<size_t> order(inits.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return inits[a].id.creator != inits[b].id.creator ? inits[a].id.creator < inits[b].id.creator
                                                      : inits[a].id.serial < inits[b].id.serial;
  });
  MPI_Group world;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  for (size_t i : order) {
    const pending_init &p = inits[i];
    MPI_Group grp;
    check_mpi(MPI_Group_incl(world, p.nranks, members[i].data(), &grp), "MPI_Group_incl", at);
    ncclComm *c = new ncclComm();
    check_mpi(MPI_Comm_create_group(MPI_COMM_WORLD, grp, TAG_BASE + 8000 + p.id.serial % 4000, &c->mpi),
              "MPI_Comm_create_group", at);
    MPI_Group_free(&grp);
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    c->nranks = p.nranks;
    c->rank = p.rank;
    c->creator = p.id.creator;
    c->serial = p.id.serial;
    cudaGetDevice(&c->device);
    *p.out = c;
  }
  MPI_Group_free(&world);
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclInvalidArgument: return "invalid argument";
  case ncclInvalidUsage: return "invalid usage";
  case ncclInternalError: return "internal error";
  case ncclSystemError: return "unhandled system error";
  case ncclUnhandledCudaError: return "unhandled cuda error";
  case ncclRemoteError: return "remote process exited or there was a network error";
  default: return "unhandled error";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return g_last_error.c_str();
}

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid) {
  int up = 0;
  MPI_Initialized(&up);
  if (!up) fatal("ncclGetUniqueId: gpu-emu's NCCL runs over MPI, which is not initialised");
  id_fields f;
  memset(&f, 0, sizeof f);
  memcpy(f.magic, ID_MAGIC, sizeof f.magic);
  MPI_Comm_rank(MPI_COMM_WORLD, &f.creator);
  f.serial = g_serial++;
  memset(uid, 0, sizeof *uid);
  memcpy(uid->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  pending_init p;
  p.out = comm;
  p.nranks = nranks;
  p.rank = rank;
  memcpy(&p.id, commId.internal, sizeof p.id);
  if (memcmp(p.id.magic, ID_MAGIC, sizeof ID_MAGIC) != 0)
    fatal("ncclCommInitRank: the id was not made by ncclGetUniqueId");
  *comm = nullptr;
  if (g_group_depth) {
    g_inits.push_back(p);
    return ncclSuccess;
  }
  std::vector<pending_init> one(1, p);
  make_comms(one);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  drain_all("ncclCommDestroy"); /* its operations finish first */
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  g_group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth < 1) {
    g_last_error = "ncclGroupEnd without ncclGroupStart";
    return ncclInvalidUsage;
  }
  if (--g_group_depth) return ncclSuccess;
  /* MT_EMU_NCCL_FAIL=init: communicators fail to come up, on every rank
   * (how a program cleans up after that is tested) */
  const char *fail = getenv("MT_EMU_NCCL_FAIL");
  if (fail && !strcmp(fail, "init") && !g_inits.empty()) {
    for (pending_init &p : g_inits) *p.out = nullptr;
    g_inits.clear();
    g_grouped.clear();
    g_last_error = "gpu-emu: MT_EMU_NCCL_FAIL=init";
    return ncclSystemError;
  }
  if (!g_inits.empty()) {
    std::vector<pending_init> inits;
    inits.swap(g_inits);
    make_comms(inits);
  }
  std::vector<std::pair<cudaStream_t, task>> calls;
  calls.swap(g_grouped);
  if (!calls.empty()) submit(std::move(calls));
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return add(task{T_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, op, 0, take_site()}, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return add(task{T_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, take_site()},
             stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return add(task{T_REDUCE_SCATTER, comm, sendbuff, recvbuff, recvcount, datatype, op, 0, take_site()},
             stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return add(task{T_BROADCAST, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, take_site()},
             stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return add(task{T_SEND, comm, sendbuff, nullptr, count, datatype, ncclSum, peer, take_site()}, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return add(task{T_RECV, comm, nullptr, recvbuff, count, datatype, ncclSum, peer, take_site()}, stream);
}

} // extern "C"
