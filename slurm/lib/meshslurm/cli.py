"""The command line: render, campaign, systems, modules, cluster."""
import argparse
import os
import re
import subprocess
import sys

from .campaign import cmd_campaign
from .cluster import cmd_cluster
from .common import (EXIT_BADINPUT, EXIT_RUNTIME, EXIT_UNAVAILABLE, JOBS, PROG, SRC, BadInput,
                     Failure, Unavailable, format_walltime, parse_assignment, q)
from .render import cmd_render
from .script import MODULE_LOADER
from .system import System

# ---------------------------------------------------------------------------
# systems: the profiles

def cmd_systems(a):
    for f in sorted(os.listdir(os.path.join(SRC, "slurm", "systems"))):
        if not f.endswith(".ini"):
            continue
        s = System(os.path.join(SRC, "slurm", "systems", f))
        qos = ", ".join("%s %d-%d nodes <= %s" % (n, lo, hi, format_walltime(t)) for n, lo, hi, t in s.qos)
        print("%-18s %s\n%18s partition %s, %d tasks/node, %d GPUs/node, %d CPUs/task%s%s%s"
              % (s.name, s.description, "", s.partition or "(default)", s.tasks_per_node,
                 s.gpus_per_node, s.cpus_per_task, ", exclusive" if s.exclusive else "",
                 ", account required" if s.account_required else "", "; QoS: " + qos if qos else ""))
        extra = []
        if s.mem_per_node:
            extra.append("--mem=%d" % s.mem_per_node)
        if s.modules:
            extra.append("modules " + " ".join(m for _, m in s.modules))
        if s.tmpdir:
            extra.append("TMPDIR under " + s.tmpdir)
        if s.output_root:
            extra.append("runs under " + s.output_root)
        if s.report_partition:
            extra.append("report job on " + s.report_partition)
        if extra:
            print("%18s %s" % ("", "; ".join(extra)))
    return 0


# ---------------------------------------------------------------------------
# modules: the profile's module loading, for `source slurm/leonardo/env.sh`

def cmd_modules(a):
    """Shell code loading the run modules, then (building needs them) the
    build modules; jobs load the run modules only"""
    system = System(a.system, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    modules = system.modules + system.build_modules
    if not modules:
        print(": no modules in %s" % os.path.relpath(system.path, SRC))
        return 0
    print(MODULE_LOADER)
    print("mt_load_modules %s || { echo \"module $MT_MODULE_FAILED did not load: check \\`module "
          "avail\\` and [modules] or [build_modules] in %s\" >&2; false; }"
          % (" ".join(q(m) for _, m in modules), os.path.relpath(system.path, SRC)))
    return 0


# ---------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(message)


def positive_int(text):
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got '%s'" % text)
    return int(text)


def nonneg_int(text):
    if not re.fullmatch(r"\d+", text):
        raise argparse.ArgumentTypeError("expected a non-negative integer, got '%s'" % text)
    return int(text)


def add_common(p):
    p.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the system profile (e.g. env_file=..., launcher=...)")
    p.add_argument("--bin", help="directory of the meshtrain executables (default build/bin)")
    p.add_argument("--workdir", help="the job's working directory (default: the source tree)")
    p.add_argument("--account", help="Slurm account (required on LEONARDO)")
    p.add_argument("--max-restarts", type=nonneg_int, default=10,
                   help="requeue at most this many times (default 10)")
    p.add_argument("--max-failures", type=nonneg_int, default=3,
                   help="of those, after a failure (exit 3: the watchdog, a lost rank; or a rank "
                        "killed by a signal) with a checkpoint to resume from (default 3)")
    p.add_argument("--no-check", action="store_true",
                   help="do not run meshtrain --check on the configuration of each train job")


def main(argv):
    ap = Parser(prog=PROG, description="renders meshtrain Slurm job scripts and scaling-study campaigns")
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("render", help="render one job script into a run directory")
    r.add_argument("job", choices=JOBS)
    r.add_argument("--system", required=True, help="profile name in slurm/systems/ or a path")
    r.add_argument("--nodes", type=positive_int)
    r.add_argument("--ranks", type=positive_int, help="total ranks (default nodes x tasks per node)")
    r.add_argument("--tasks-per-node", type=positive_int)
    r.add_argument("--gpus-per-node", type=nonneg_int)
    r.add_argument("--cpus-per-task", type=nonneg_int)
    r.add_argument("--time", help="walltime (default: the profile's)")
    r.add_argument("--qos", help="QoS (default: chosen from the profile's table by size and time)")
    r.add_argument("--signal-s", type=positive_int, help="USR1 this many seconds before the walltime")
    r.add_argument("--layout", help="dp-only (every rank data-parallel, the default) or tp=2,pp=2,... "
                   "(dp fills the rest); --set parallel.layout=auto lets meshtrain plan it at every "
                   "(re)start")
    r.add_argument("--config", help="meshtrain INI file copied into the run directory")
    r.add_argument("--set", action="append", default=[], metavar="section.key=value")
    r.add_argument("--env", dest="env", action="append", default=[], metavar="NAME=VALUE",
                   help="export this variable in the job (e.g. NCCL_IB_SL=1)")
    r.add_argument("--bench", action="append", help="a meshbench command line (repeatable)")
    r.add_argument("--args", help="ckpt-convert: the meshckpt command line")
    r.add_argument("--run-dir", help="where the script, config and results go")
    r.add_argument("--name", help="Slurm job name")
    r.add_argument("--stdout", action="store_true", help="print the script, write nothing")
    add_common(r)
    c = sub.add_parser("campaign", help="turn a sweep spec into point directories and a submit script")
    c.add_argument("sweep")
    c.add_argument("--out", help="campaign directory (default outputs/campaigns/<name>)")
    c.add_argument("--dry-run", action="store_true", help="print the plan and the sbatch commands only")
    c.add_argument("--submit", action="store_true", help="run submit.sh after writing")
    c.add_argument("--force", action="store_true", help="overwrite an existing campaign directory")
    c.add_argument("--set", action="append", default=[], metavar="section.key=value",
                   help="a meshtrain key for every point, after the sweep's [set] (wins)")
    c.add_argument("--emulate", action="store_true",
                   help="run every point here on meshtrain's virtual device (train.device = "
                        "virtual): predicted results in points/*/predicted/ and predicted.csv")
    c.add_argument("--emulate-hw", metavar="PROFILE",
                   help="the hardware profile emulated (default: the system's hw)")
    c.add_argument("--emulate-steps", type=int, default=3, metavar="N",
                   help="steps of each emulated point (default 3)")
    c.add_argument("--emulate-max-ranks", type=int, default=512, metavar="N",
                   help="points with more ranks are skipped, and listed (default 512)")
    c.add_argument("--emulate-timeout", type=int, default=1800, metavar="S",
                   help="seconds an emulated point may take (default 1800)")
    add_common(c)
    sub.add_parser("systems", help="list the system profiles")
    m = sub.add_parser("modules", help="print shell code that loads the profile's modules "
                                       "(what slurm/leonardo/env.sh evaluates)")
    m.add_argument("--system", required=True)
    m.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE")
    k = sub.add_parser("cluster", help="a local Slurm cluster on this machine (root, Debian's "
                                       "slurmctld slurmd slurm-client munge): start, status, stop")
    k.add_argument("action", choices=("start", "status", "stop"))
    k.add_argument("--dir", help="its directory: configuration, state, logs (default "
                                 "outputs/local-cluster); nothing is written outside it")
    k.add_argument("--nodes", type=positive_int, default=2, help="emulated nodes (default 2)")
    a = ap.parse_args(argv)
    if a.cmd is None:
        ap.print_help()
        return EXIT_BADINPUT
    if a.cmd == "render":
        a.env_kv = [parse_assignment(s, "--env") for s in a.env]
        return cmd_render(a)
    if a.cmd == "campaign":
        return cmd_campaign(a)
    if a.cmd == "modules":
        return cmd_modules(a)
    if a.cmd == "cluster":
        return cmd_cluster(a)
    return cmd_systems(a)


def run(argv):
    """main() with each kind of error as one line and its exit code"""
    try:
        return main(argv)
    except BadInput as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return EXIT_BADINPUT
    except Unavailable as e:
        print("%s: unavailable: %s" % (PROG, e), file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (Failure, OSError, subprocess.SubprocessError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return EXIT_RUNTIME
