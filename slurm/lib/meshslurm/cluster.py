"""`meshslurm.py cluster start|status|stop`: a private Slurm on this machine."""
import datetime
import os
import shutil
import signal
import socket
import subprocess
import time

from .common import EXIT_RUNTIME, SRC, BadInput, Failure, Unavailable, absdir, q

# ---------------------------------------------------------------------------
# a local Slurm cluster: a private munged, slurmctld and emulated nodes shaped
# like LEONARDO Booster nodes (32 CPUs, 494000 MB, 4 fake GPUs, partition
# boost_usr_prod), all on this machine and all inside one directory: its
# configuration, munge key and socket, state, spool, logs and pid files. The
# daemons outlive the command; `cluster stop` ends them by their pids. What
# each setting is for: the project notes on a local Slurm.

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLUSTER_TOOLS = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue",
                 "scancel", "scontrol")
CLUSTER_CONF = """\
ClusterName=mtlocal
SlurmctldHost={host}
SlurmctldPort={port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it becomes
# eligible again (5: the least Slurm takes)
AuthInfo=socket={dir}/munge/socket,cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# a requeued job starts once eligible, not at the next 30 s backfill pass
SchedulerParameters=sched_interval=2,bf_interval=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
SlurmdParameters=config_overrides
TmpFS={dir}/tmp-%n
GresTypes=gpu
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName={nodes} NodeHostname={host} NodeAddr=127.0.0.1 Port={node_ports} CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=494000 Gres=gpu:4 State=UNKNOWN
PartitionName=boost_usr_prod Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
"""
# fake GPUs must be character devices (file-less ones are dropped)
GRES_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


class LocalCluster:
    def __init__(self, directory, n_nodes=2):
        self.dir = absdir(directory)
        self.names = ["n%d" % (i + 1) for i in range(n_nodes)]
        self.conf = os.path.join(self.dir, "slurm.conf")
        path = os.environ.get("PATH") or DEFAULT_PATH
        self.path = path + ":" + DEFAULT_PATH  # munged and the daemons live in sbin
        self.tools = {t: shutil.which(t, path=self.path) for t in CLUSTER_TOOLS}

    def env(self):
        """The clients' and daemons' environment: this cluster's SLURM_CONF and
        none of the SLURM_* variables of a job this command may run in"""
        e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        e["PATH"] = self.path
        e["SLURM_CONF"] = self.conf
        return e

    def run(self, argv, timeout=30, check=True):
        r = subprocess.run([self.tools.get(argv[0]) or argv[0]] + list(argv[1:]), env=self.env(),
                           cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=timeout)
        if check and r.returncode != 0:
            raise Failure("cluster: %s failed (exit %d): %s%s" % (
                " ".join(argv), r.returncode, r.stdout.strip().replace("\n", " | ")[-300:],
                self.log_hint()))
        return r

    def log_hint(self):
        return " (logs: %s/*.log)" % self.dir

    def daemons(self):
        """(name, pid file, program) of every daemon, munged last to stop"""
        ds = [("slurmd " + n, os.path.join(self.dir, "slurmd-%s.pid" % n), "slurmd") for n in self.names]
        return ds + [("slurmctld", os.path.join(self.dir, "slurmctld.pid"), "slurmctld"),
                     ("munged", os.path.join(self.dir, "munged.pid"), "munged")]

    @staticmethod
    def pid_of(pid_file, program):
        """The pid in pid_file when that process is alive and is `program`"""
        try:
            pid = int(open(pid_file).read().split()[0])
            cmd = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[0]
        except (OSError, ValueError, IndexError):
            return None
        return pid if os.path.basename(cmd.decode(errors="replace")) == program else None

    def alive(self):
        return {name: self.pid_of(f, prog) for name, f, prog in self.daemons()}

    def export_line(self):
        return "export SLURM_CONF=%s" % q(self.conf)

    def pick_ports(self):
        """SlurmctldPort and one port per node, all free now; the search starts
        at a place given by the directory, so two clusters rarely collide"""
        n = 1 + len(self.names)
        start = sum(self.dir.encode()) % 400
        for k in range(400):
            base = 17100 + ((start + k) % 400) * 8
            try:
                for port in range(base, base + n):
                    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as so:
                        so.bind(("", port))
                return base
            except OSError:
                continue
        raise Failure("cluster: no free TCP ports between 17100 and 20300")

    def start(self):
        missing = [t for t, p in self.tools.items() if not p]
        if missing:
            raise Unavailable("cluster: Slurm and munge are not installed here (no %s): apt-get "
                              "install slurmctld slurmd slurm-client munge, as apps/scripts/setup.sh "
                              "does" % ", ".join(missing))
        if os.geteuid() != 0:
            raise Unavailable("cluster: the local cluster runs its daemons as root (SlurmUser=root); "
                              "not root here")
        up = self.alive()
        if all(up.values()):
            print("cluster: already running in %s" % self.dir)
            print(self.export_line())
            return 0
        if any(up.values()):
            raise Failure("cluster: partly running in %s (%s); run `cluster stop` first"
                          % (self.dir, ", ".join(k for k, v in up.items() if v)))
        # a job's step sockets live in the spool directories: keep the paths short
        if len(self.dir) > 80:
            raise BadInput("cluster: --dir %s is %d characters; UNIX socket paths under it need "
                           "it under 80" % (self.dir, len(self.dir)))
        os.makedirs(self.dir, exist_ok=True)
        for name in os.listdir(self.dir):  # a fresh cluster: no state of a previous one
            if name in ("state", "munge") or name.startswith(("spool-", "tmp-")):
                shutil.rmtree(os.path.join(self.dir, name))
            elif name.endswith((".log", ".pid", ".out")):
                os.remove(os.path.join(self.dir, name))
        for sub in ["state", "munge"] + ["spool-" + n for n in self.names] + ["tmp-" + n for n in self.names]:
            os.makedirs(os.path.join(self.dir, sub))
        os.chmod(os.path.join(self.dir, "munge"), 0o700)
        try:
            self._start_daemons()
        except BaseException:
            self.stop(quiet=True)
            raise
        return 0

    def _start_daemons(self):
        d = self.dir
        key = os.path.join(d, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        sock = os.path.join(d, "munge", "socket")
        r = self.run(["munged", "--force", "--socket=" + sock, "--key-file=" + key,
                      "--pid-file=" + os.path.join(d, "munged.pid"),
                      "--log-file=" + os.path.join(d, "munged.log"),
                      "--seed-file=" + os.path.join(d, "munge", "seed")], check=False)
        if r.returncode != 0:
            raise Unavailable("cluster: munged does not start here: %s" % r.stdout.strip()[-200:])
        cred = self.run(["munge", "--socket=" + sock, "-n"], check=False)
        if cred.returncode != 0 or subprocess.run(
                [self.tools["unmunge"], "--socket=" + sock], input=cred.stdout, env=self.env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                universal_newlines=True).returncode != 0:
            raise Unavailable("cluster: munge does not work here (munge -n | unmunge)")
        base = self.pick_ports()
        host = socket.gethostname().split(".")[0]
        nodes = "n[1-%d]" % len(self.names) if len(self.names) > 1 else "n1"
        ports = "%d-%d" % (base + 1, base + len(self.names)) if len(self.names) > 1 else str(base + 1)
        with open(self.conf, "w") as f:
            f.write(CLUSTER_CONF.format(host=host, port=base, dir=d, nodes=nodes, node_ports=ports))
        with open(os.path.join(d, "gres.conf"), "w") as f:
            for dev in GRES_DEVICES:
                f.write("NodeName=%s Name=gpu File=%s\n" % (nodes, dev))
        t0 = datetime.datetime.now()
        self.run(["slurmctld", "-i"])
        for n in self.names:
            self.run(["slurmd", "-N", n])
        for _ in range(60):
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            states = dict(l.split() for l in r.stdout.splitlines() if len(l.split()) == 2)
            if r.returncode == 0 and sorted(states) == sorted(self.names) and \
                    set(states.values()) == {"idle"}:
                secs = (datetime.datetime.now() - t0).total_seconds()
                print("cluster: %d nodes idle after %.1f s in %s (partition boost_usr_prod, ports %d-%d)"
                      % (len(self.names), secs, d, base, base + len(self.names)))
                print("use it from a shell with:")
                print(self.export_line())
                return
            time.sleep(0.5)
        raise Failure("cluster: the nodes did not become idle in 30 s: %s%s"
                      % (r.stdout.strip().replace("\n", " | "), self.log_hint()))

    def stray_steps(self):
        """slurmstepd processes of this cluster's jobs (their environment names our
        slurm.conf): left running when a daemon dies under them"""
        pids, mark = [], ("SLURM_CONF=" + self.conf).encode() + b"\0"
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                comm = open("/proc/%s/comm" % e).read().strip()
                environ = open("/proc/%s/environ" % e, "rb").read() + b"\0"
            except OSError:
                continue
            if comm.startswith("slurmstepd") and (b"\0" + mark) in b"\0" + environ:
                pids.append(int(e))
        return pids

    def stop(self, quiet=False):
        up = self.alive()
        if up.get("slurmctld"):  # end the jobs first: their steps would outlive slurmd
            r = self.run(["squeue", "-h", "-o", "%i"], check=False)
            jobs = r.stdout.split() if r.returncode == 0 else []
            if jobs:
                self.run(["scancel"] + jobs, check=False)
                for _ in range(30):
                    r = self.run(["squeue", "-h", "-o", "%i"], check=False)
                    if r.returncode != 0 or not r.stdout.split():
                        break
                    time.sleep(0.5)
        pids = [p for p in up.values() if p]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for _ in range(20):
            if not any(self.pid_of(f, prog) for _, f, prog in self.daemons()):
                break
            time.sleep(0.25)
        for name, f, prog in self.daemons():
            pid = self.pid_of(f, prog)
            if pid:
                os.kill(pid, signal.SIGKILL)
        for pid in self.stray_steps():
            os.kill(pid, signal.SIGKILL)
        for _, f, _ in self.daemons():
            if os.path.exists(f):
                os.remove(f)
        if not quiet:
            print("cluster: %s in %s" % ("stopped" if pids else "not running", self.dir))
        return 0

    def status(self):
        up = self.alive()
        for name, pid in up.items():
            print("%-10s %s" % (name, "pid %d" % pid if pid else "not running"))
        if not all(up.values()):
            print("cluster: %s in %s" % ("partly running" if any(up.values()) else "not running", self.dir))
            return EXIT_RUNTIME
        print(self.run(["sinfo", "-N", "-o", "%N %P %t %c %m %G"], check=False).stdout.rstrip())
        jobs = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        print("cluster: running in %s, %d jobs queued or running (accounting is off: read jobs "
              "with scontrol show job)" % (self.dir, len(jobs)))
        print(self.export_line())
        return 0


def cmd_cluster(a):
    c = LocalCluster(a.dir or os.path.join(SRC, "outputs", "local-cluster"), a.nodes)
    return {"start": c.start, "stop": c.stop, "status": c.status}[a.action]()


