"""System profiles (slurm/systems/*.ini): partition, QoS table, node shape,
modules, env file, launcher, where outputs go."""
import os
import re
import shlex

from .common import SRC, BadInput, format_walltime, parse_bool, parse_walltime, read_ini

# ---------------------------------------------------------------------------
# system profiles

class System:
    """A machine: partition, QoS table, node shape, env file, launcher."""

    KEYS = ("name", "description", "partition", "account_required", "tasks_per_node",
            "gpus_per_node", "cpus_per_task", "exclusive", "max_nodes", "env_file", "launcher",
            "default_time", "signal_s", "hw")
    # keys a profile may leave out, with what leaving them out means
    OPTIONAL = {
        "mem_per_node": "0",       # MB per node for --mem (0: no --mem)
        "tmpdir": "",              # the jobs' TMPDIR root, expanded in the job ("": keep the node's)
        "output_root": "",         # default home of run and campaign directories ("": outputs/)
        "data_root": "",           # where relative data.train/data.val paths of train jobs are
                                   # found ("": the job's working directory, the source tree)
        "report_modules": "",      # keys of [modules] the report job loads ("": all of them)
        "no_exclusive_qos": "",    # QoS names that cannot be combined with --exclusive
        "report_partition": "",    # partition of a campaign's report job ("": the profile's)
        "report_qos": "",          # its QoS when report_partition is set ("": none)
        "device": "",              # train.device of its train jobs ("": meshtrain's default)
        "precision": "",           # train.precision of its train jobs ("": meshtrain's default)
    }

    def __init__(self, name_or_path, overrides=()):
        path = name_or_path
        if not os.path.sep in path and not path.endswith(".ini"):
            path = os.path.join(SRC, "slurm", "systems", name_or_path + ".ini")
        if not os.path.isfile(path):
            known = sorted(f[:-4] for f in os.listdir(os.path.join(SRC, "slurm", "systems"))
                           if f.endswith(".ini"))
            raise BadInput("system '%s': no profile %s (known: %s)"
                           % (name_or_path, path, ", ".join(known)))
        cp = read_ini(path, "system", None)  # env names keep their case
        self.path = path
        s = dict(self.OPTIONAL)
        s.update(cp.items("system"))
        # [modules]: one key per module, loaded in file order by every job;
        # [build_modules]: loaded after them only to build (slurm/leonardo/env.sh)
        modules = list(cp.items("modules")) if cp.has_section("modules") else []
        build_modules = list(cp.items("build_modules")) if cp.has_section("build_modules") else []
        for k, v in overrides:
            if k.startswith(("modules.", "build_modules.")):
                table = modules if k.startswith("modules.") else build_modules
                name = k.split(".", 1)[1]  # replaced in place, added at the end, or
                if name not in [n for n, _ in table]:  # dropped by an empty value
                    table.append((name, v))
                table[:] = [(n, v if n == name else m) for n, m in table]
                continue
            if k not in self.KEYS and k not in self.OPTIONAL:
                raise BadInput("--profile-set %s: unknown profile key (%s, modules.NAME, "
                               "build_modules.NAME)"
                               % (k, ", ".join(self.KEYS + tuple(self.OPTIONAL))))
            s[k] = v
        for k in self.KEYS:
            if k not in s:
                raise BadInput("%s: [system] lacks '%s'" % (path, k))

        def num(key):
            v = s[key].strip()
            if not re.fullmatch(r"\d+", v):
                raise BadInput("%s: %s must be a non-negative integer, got '%s'" % (path, key, v))
            return int(v)

        self.name = s["name"].strip()
        self.description = s["description"].strip()
        self.partition = s["partition"].strip()
        self.account_required = parse_bool(s["account_required"], path + ": account_required")
        self.tasks_per_node = num("tasks_per_node")
        self.gpus_per_node = num("gpus_per_node")
        self.cpus_per_task = num("cpus_per_task")
        self.exclusive = parse_bool(s["exclusive"], path + ": exclusive")
        self.max_nodes = num("max_nodes")
        self.env_file = s["env_file"].strip()
        self.launcher = shlex.split(s["launcher"])
        self.default_time = parse_walltime(s["default_time"])
        self.signal_s = num("signal_s")
        self.hw = s["hw"].strip()
        self.mem_per_node = num("mem_per_node")
        self.tmpdir = s["tmpdir"].strip()
        if not re.fullmatch(r"[A-Za-z0-9_./${}:+@-]*", self.tmpdir):
            raise BadInput("%s: tmpdir = '%s': use a path with $VARIABLES, nothing else"
                           % (path, self.tmpdir))
        self.output_root = s["output_root"].strip()
        self.no_exclusive_qos = set(s["no_exclusive_qos"].replace(",", " ").split())
        self.report_partition = s["report_partition"].strip()
        self.report_qos = s["report_qos"].strip()
        self.device = s["device"].strip()
        if self.device not in ("", "cpu", "cuda", "auto"):
            raise BadInput("%s: device = '%s': expected cpu, cuda or auto" % (path, self.device))
        self.precision = s["precision"].strip()
        if self.precision not in ("", "fp32", "bf16"):
            raise BadInput("%s: precision = '%s': expected fp32 or bf16" % (path, self.precision))
        self.modules = self.module_list(path, "modules", modules)
        self.build_modules = self.module_list(path, "build_modules", build_modules)
        self.report_modules = s["report_modules"].split()
        for name in self.report_modules:
            if name not in [n for n, _ in self.modules]:
                raise BadInput("%s: report_modules names '%s', not a key of [modules] (%s)"
                               % (path, name, ", ".join(n for n, _ in self.modules)))
        self.data_root = s["data_root"].strip()
        if self.tasks_per_node < 1:
            raise BadInput("%s: tasks_per_node must be >= 1" % path)
        self.qos = []  # (name, min_nodes, max_nodes, max_seconds), in file order
        if cp.has_section("qos"):
            for qname, spec in cp.items("qos"):
                m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s+(\S+)\s*", spec)
                if not m:
                    raise BadInput("%s: [qos] %s = '%s': expected MIN-MAX WALLTIME" % (path, qname, spec))
                self.qos.append((qname, int(m.group(1)), int(m.group(2)), parse_walltime(m.group(3))))
        self.env = [(k, v.strip()) for k, v in cp.items("env")] if cp.has_section("env") else []

    @staticmethod
    def module_list(path, section, items):
        out = []
        for name, mod in items:
            mod = mod.strip()
            if mod and not re.fullmatch(r"[A-Za-z0-9_.+/@:=~-]+", mod):
                raise BadInput("%s: [%s] %s = '%s': not a module name" % (path, section, name, mod))
            if mod:
                out.append((name, mod))
        return out

    def report_module_list(self):
        """(name, module) of the campaign report job: report_modules, or all"""
        if not self.report_modules:
            return self.modules
        return [(n, m) for n, m in self.modules if n in self.report_modules]

    def expand_root(self, key, value):
        """a profile path with $VARIABLES expanded now, here (Slurm's --output
        cannot expand them, and the job should not depend on its environment)"""
        root = os.path.expanduser(os.path.expandvars(value))
        unset = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", root)
        if unset:
            raise BadInput("system %s: %s = %s, but $%s is not set here (render on the "
                           "cluster's login node, give the directory with --run-dir or --out, or "
                           "--profile-set %s=DIR)" % (self.name, key, value, unset[0], key))
        return os.path.abspath(root)

    def check_qos(self, qos, nodes, seconds):
        """A QoS the user named: refused when the profile's table says it cannot fit."""
        for name, lo, hi, tmax in self.qos:
            if name == qos and not (lo <= nodes <= hi and seconds <= tmax):
                raise BadInput("QoS %s allows %d-%d nodes and at most %s; the job asks for %d node%s "
                               "for %s" % (qos, lo, hi, format_walltime(tmax), nodes,
                                           "" if nodes == 1 else "s", format_walltime(seconds)))
        return qos

    def default_output_root(self):
        """Where run and campaign directories go unless told: output_root (its
        $VARIABLES expanded now: Slurm's --output cannot expand them), else
        outputs/ of the source tree."""
        if not self.output_root:
            return os.path.join(SRC, "outputs")
        return self.expand_root("output_root", self.output_root)

    def choose_qos(self, nodes, seconds):
        """The first QoS whose node range and walltime fit; None if the table is empty."""
        if not self.qos:
            return None
        for name, lo, hi, tmax in self.qos:
            if lo <= nodes <= hi and seconds <= tmax:
                return name
        table = "; ".join("%s %d-%d nodes <= %s" % (n, lo, hi, format_walltime(t))
                          for n, lo, hi, t in self.qos)
        raise BadInput("system %s: no QoS allows %d nodes for %s (%s); pass --qos to choose one"
                       % (self.name, nodes, format_walltime(seconds), table))


