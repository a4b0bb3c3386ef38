#!/usr/bin/env python3
"""The rule behind zero.ops_only: model, parallel, optim and train never touch
tensor elements themselves. Their float data is read and written only by the
backend's ops (the op table) and allocated by its allocator, so a device
backend changes lib/kernels and lib/comm and nothing else.

ops_only.py ROOT DIR...   prints one "offence:" line per breach (file:line,
                          function, what) in DIR/*.c under ROOT; exit 1 if any

A breach is any of:
  element    an element of float memory read or written here: a subscript
             or a dereference of a float pointer (a local, a parameter or a
             struct member declared `float *`), or of a cast to float *
  copy       memset/memcpy/memmove of float data (sizeof(float))
  allocator  mt_mem_alloc (buffers come from ops->alloc)
  host       a host float buffer (malloc/calloc/mt_malloc/mt_calloc/realloc
             into a float pointer, or of sizeof(float)) kept anywhere but a
             local float pointer, or used for anything but the host side of
             an upload or download, initial values (mt_registry_init_values),
             a file (fwrite/fread), free, an alias that obeys the same rule,
             or a function of these modules (whose body is checked as well)
  include    a backend's private header (kernels/cpu, kernels/cuda) or BLAS

No name is exempt. Known breaches are listed in ALLOWED below, by function
and variable, each with its reason: a new breach anywhere else fails, and so
does an entry whose function no longer breaks the rule (the list cannot go
stale).
"""
import os
import re
import sys

# (function, variable): why it may touch float elements on the host
ALLOWED = {
    ("mt_model_rope_table", "inv"): "rotary frequencies: hs/2 floats computed once on the host",
    ("mt_model_rope_table", "cs"): "rotary cos|sin table: computed once on the host, then uploaded",
    ("routed_forward", "psum"): "the load-balancing loss figure: S x E downloaded sums",
    ("routed_forward", "frac"): "the load-balancing loss figure: S x E downloaded fractions",
    ("mt_ep_route", "host"): "routing fractions from the host-side integer routing, uploaded",
    ("mt_ep_route", "frac"): "the last routing's fractions (S x E floats) kept on the host for "
                             "the plan's replay of the same routing, uploaded again",
    ("rope_upload", "g_rope_cs"): "the rotary table computed once on the host, kept for the next "
                                  "model of the same settings (the plan builds one a layout)",
    # the aux-loss-free routing bias: E floats per MoE block, a controller
    # stepped on the host from the integer token counts, then uploaded; its
    # host copy is what checkpoints save and load
    ("mt_moe_create", "bias_host"): "the routing bias's host copy (E floats a block)",
    ("mt_gpt_moe_bias_update", "bias"): "the routing bias stepped on the host",
    ("mt_gpt_moe_bias_update", "bias_host"): "the routing bias stepped on the host",
    ("mt_gpt_set_moe_balance", "bias_host"): "the routing bias's start (a forced skew) set on the host",
    ("mt_gpt_moe_set_bias", None): "a loaded routing bias into its host copy, then uploaded",
    ("load_moe_bias", "bias"): "the routing bias read from the checkpoint on the host",
    # the test hook MT_TEST_GRAD_SUMS (gpu-emu's gradient checks): the
    # step-1 reduced gradients downloaded and summed per tensor for a file
    ("grad_sums_range", "h"): "a test hook's gradient sums, downloaded for a file",
}

HOST_SINKS = {"upload", "download", "mt_registry_init_values", "fwrite", "fread", "free"}
ALLOC = r"(?:mt_malloc|mt_calloc|malloc|calloc|realloc)"
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def strip(src):
    """comments and literals blanked, line numbers kept"""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    out = re.sub(r"/\*.*?\*/", blank, src, flags=re.S)
    out = re.sub(r"//[^\n]*", blank, out)
    out = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', out)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", out)


def declared_float_ptrs(text):
    """names declared `float *name` (or `float *a, *b`) in text; arrays of
    pointers (`float *name[4]`) are returned apart: indexing them is not
    touching an element. `float **name` is not a float pointer."""
    ptrs, arrays = set(), set()
    for m in re.finditer(r"\bfloat\s*((?:\*\s*(?:const\s+|restrict\s+)*\w+\s*(?:\[[^\]]*\])?"
                         r"\s*(?:=[^,;(){}]*(?:\((?:[^()]|\([^()]*\))*\)[^,;(){}]*)*)?\s*,?\s*)+)", text):
        for d in re.finditer(r"(?<![*\w])\*\s*(?:const\s+|restrict\s+)*(\w+)\s*(\[)?", m.group(1)):
            (arrays if d.group(2) else ptrs).add(d.group(1))
    return ptrs, arrays


def struct_bodies(code, opening):
    """the structs of code whose opening (a pattern ending at the "{")
    matches: yields (match, body, end), the body without function pointers'
    parameters and nested structs and unions (each is its own match), end
    the index just past the closing "}" """
    for m in re.finditer(opening, code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        body = code[m.end():i - 1]
        while re.search(r"\([^()]*\)", body):
            body = re.sub(r"\([^()]*\)", " ", body)
        yield m, re.sub(r"\{[^{}]*\}", " ", body), i


def struct_members(code):
    """(float * members, members of any other type) of the structs in code"""
    floats, others = set(), set()
    for _, body, _ in struct_bodies(code, r"\bstruct\b[^{;()]*\{"):
        for decl in body.split(";"):
            names = re.findall(r"(\w+)\s*(?:\[[^\]]*\])*\s*(?:,|$)", decl.strip())
            if re.match(r"\s*(?:const\s+)?float\s*\*\s*\w", decl):
                ptrs, arrays = declared_float_ptrs(decl + ";")
                floats |= ptrs
                others |= arrays
                others |= set(names) - ptrs - arrays
            else:
                others |= set(names)
    return floats, others


def struct_types(code):
    """typedef'd and tagged structs of code: {type name: {member: (base, stars, array)}}"""
    types = {}
    for m, body, i in struct_bodies(code, r"\b(?:typedef\s+)?struct\s*(\w*)\s*\{"):
        members = {}
        for decl in body.split(";"):
            d = re.match(r"\s*(?:const\s+|volatile\s+|unsigned\s+|signed\s+|struct\s+)*(\w+)(.*)$",
                         decl, flags=re.S)
            if not d:
                continue
            for part in d.group(2).split(","):
                n = re.match(r"\s*(\**)\s*(?:const\s+)?(\w+)\s*(\[)?", part)
                if n:
                    members[n.group(2)] = (d.group(1), len(n.group(1)), bool(n.group(3)))
        after = re.match(r"\s*(\w+)\s*;", code[i:])
        for name in (m.group(1), after.group(1) if after else ""):
            if name:
                types[name] = members
    return types


def float_member_chains(body, var_types, types):
    """positions in body of `base->a.b[` (or `*base->a.b`) whose last member
    is a float * (or a float array), resolved through the declared types;
    yields (position, member, resolved)"""
    for m in re.finditer(r"(?<![\w.>])(\w+)((?:\s*(?:->|\.)\s*\w+)+)", body):
        names = re.findall(r"\w+", m.group(2))
        t = var_types.get(m.group(1))
        kind = None
        for k, n in enumerate(names):
            mem = types.get(t, {}).get(n) if t else None
            if mem is None:
                t = None
                break
            t = mem[0]
            if k == len(names) - 1:
                kind = mem
        yield m, names[-1], (kind if t is not None else None)


def functions(code):
    """(name, parameter text, body start, body end) of each function definition"""
    depth, start = 0, None
    for m in re.finditer(r"[{}]", code):
        if m.group() == "{":
            if depth == 0:
                start = m.start()
            depth += 1
        else:
            depth -= 1
            if depth == 0 and start is not None:
                head = code[max(0, start - 600):start]
                h = re.search(r"(\w+)\s*\(((?:[^()]|\([^()]*\))*)\)\s*$", head)
                if h and h.group(1) not in KEYWORDS and not re.search(r"=\s*$", head):
                    yield h.group(1), h.group(2), start, m.end()
                start = None


def is_declarator(body, star):
    """body[star] is the '*' of a declarator (`float *a = ..., *name`, or
    `for (float *p = x; ...`), not a dereference"""
    before = body[:star].rstrip()
    if re.search(r"\bfloat$", before):
        return True
    if not before.endswith(","):
        return False
    start = max(body.rfind(c, 0, star) for c in ";{}")
    stmt = body[start + 1:star]
    for_init = re.match(r"\s*for\s*\(", stmt)
    if for_init:
        stmt = stmt[for_init.end():]
    return bool(re.match(r"\s*(?:static\s+)?(?:const\s+)?float\b", stmt)) and \
        stmt.count("(") == stmt.count(")")


def deref_at(body, star):
    """body[star] is '*': a dereference (not a multiplication)? By what comes
    before it: an operator, an opening bracket, `return`, or the closing
    parenthesis of an if/for/while header."""
    before = body[:star].rstrip()
    if not before or before[-1] in "=(,;{}?:!&|+-<>[" or re.search(r"\breturn$", before):
        return True
    if before[-1] == ")":
        depth = 0
        for i in range(len(before) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(before[i], 0)
            if depth == 0:
                return bool(re.search(r"\b(?:if|for|while|switch)\s*$", before[:i]))
    return False


def enclosing_call(body, pos):
    """the name of the innermost call whose parentheses hold body[pos], or
    None (not inside a call's arguments)"""
    depth = 0
    for i in range(pos - 1, -1, -1):
        c = body[i]
        if c in ")]":
            depth += 1
        elif c in "([":
            if depth == 0:
                if c == "[":
                    return "["
                m = re.search(r"(\w+)\s*$", body[:i])
                return m.group(1) if m and m.group(1) not in KEYWORDS else None
            depth -= 1
        elif c in ";{}" and depth == 0:
            return None
    return None


def check(root, dirs):
    files = []
    for d in dirs:
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith(".c"):
                files.append(os.path.join(d, name))
    code = {f: strip(open(os.path.join(root, f)).read()) for f in files}
    # float * members by name: a name that some struct declares with another
    # type (a float **, an int *, a msg *) is ambiguous without types, left out
    floats, others = set(), set()
    texts = [code[f] for f in files]
    for dirpath, _, names in os.walk(os.path.join(root, "lib")):
        texts += [strip(open(os.path.join(dirpath, n)).read()) for n in names if n.endswith(".h")]
    for t in texts:
        fl, ot = struct_members(t)
        floats |= fl
        others |= ot
    members = floats - others
    types = {}
    for t in texts:
        types.update(struct_types(t))
    local_fns = {fn for f in files for fn, _, _, _ in functions(code[f])}
    offences, used = [], set()

    def report(f, text_before, fn, what):
        offences.append("%s:%d: %s(): %s" % (f, text_before.count("\n") + 1, fn, what))

    for f in files:
        src = code[f]
        raw = open(os.path.join(root, f)).read()  # the include's path is a literal
        for m in re.finditer(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', raw, flags=re.M):
            if re.match(r"(kernels/(cpu|cuda)/|cblas|openblas|cublas)", m.group(1)):
                report(f, raw[:m.start()], "-", "include: %s (a backend's own header)" % m.group(1))
        for fn, params, a, b in functions(src):
            body = src[a:b]
            at = lambda i: src[:a + i]  # noqa: E731
            ptrs, arrays = declared_float_ptrs(params + ";" + body)
            ptrs -= arrays

            def breach(i, var, what):
                if (fn, var) in ALLOWED:
                    used.add((fn, var))
                else:
                    report(f, at(i), fn, what)

            for m in re.finditer(r"\bmem(?:set|cpy|move)\s*\([^;]*sizeof\s*\(\s*float\s*\)", body):
                breach(m.start(), None, "copy: float data copied or cleared by hand")
            for m in re.finditer(r"\bmt_mem_alloc\s*\(", body):
                breach(m.start(), None, "allocator: mt_mem_alloc, not ops->alloc")
            # elements: subscripts and dereferences
            for v in ptrs:
                for m in re.finditer(r"(?<![\w.>])%s\s*\[" % re.escape(v), body):
                    breach(m.start(), v, "element: %s[...] of float memory" % v)
                for m in re.finditer(r"\*\s*\(?\s*%s\b(?!\s*\()" % re.escape(v), body):
                    if deref_at(body, m.start()) and not is_declarator(body, m.start()):
                        breach(m.start(), v, "element: *%s of float memory" % v)
            # members: by the declared types of the chain (o->m of an mt_adamw
            # *o), else by the name where no struct gives it another type
            var_types = {}
            for d in re.finditer(r"\b(?:struct\s+)?(\w+)\s*\**\s*(?:const\s+)?(\w+)\s*[;,=)\[]",
                                 params + ";" + body):
                if d.group(1) in types:
                    var_types[d.group(2)] = d.group(1)
            for m, member, kind in float_member_chains(body, var_types, types):
                is_float = (kind[0] == "float" and kind[1] + kind[2] == 1) if kind \
                    else member in members
                if not is_float:
                    continue
                rest = body[m.end():]
                if re.match(r"\s*\[", rest):
                    breach(m.start(), member, "element: %s[...] (float memory)"
                           % re.sub(r"\s+", "", m.group(0)))
                elif re.match(r"\s*(?!\(|\[|->|\.)", rest):
                    star = re.search(r"\*\s*\(?\s*$", body[:m.start()])
                    if star and deref_at(body, star.start()):
                        breach(star.start(), member, "element: *%s (float memory)"
                               % re.sub(r"\s+", "", m.group(0)))
            for m in re.finditer(r"\(\s*(?:const\s+)?float\s*\*\s*\)\s*[\w.>()-]*\)\s*\[", body):
                breach(m.start(), None, "element: a subscript of a cast to float *")
            # host float buffers: only as the host side of a transfer, and held
            # by a local float pointer (not kept in a struct or returned)
            hosts = []
            for m in re.finditer(r"\b%s\s*\(" % ALLOC, body):
                stmt_end = body.find(";", m.end())
                call = body[m.start():stmt_end]
                lhs = re.search(r"(?:(?<![\w.>])(\w+)|((?:->|\.)\s*\w+))\s*=\s*"
                                r"(?:\(\s*(?:const\s+)?float\s*\*\s*\)\s*)?$", body[:m.start()])
                target = lhs.group(1) if lhs else None
                if lhs and lhs.group(2):  # kept in a member: the entry names the member
                    target = re.sub(r"\W", "", lhs.group(2))
                if target in ptrs:
                    hosts.append(target)
                elif re.search(r"sizeof\s*\(\s*float\s*\)", call) or \
                        (lhs and lhs.group(2) and re.sub(r"\W", "", lhs.group(2)) in members):
                    breach(m.start(), target, "host: a host float buffer kept in %s"
                           % ((lhs.group(2) or target) if lhs else "no local"))
            seen = set()
            while hosts:
                v = hosts.pop()
                if v in seen:
                    continue
                seen.add(v)
                for m in re.finditer(r"(?<![\w.>])%s\b" % re.escape(v), body):
                    rest = body[m.end():]
                    if re.match(r"\s*=(?!=)", rest):  # (re)assigned: the allocation itself
                        continue
                    if re.match(r"\s*\[", rest):  # an element: reported above
                        continue
                    alias = re.search(r"\bfloat\s*\*\s*(\w+)\s*=\s*$|(?<![\w.>])(\w+)\s*=\s*$",
                                      body[max(0, m.start() - 80):m.start()])
                    if alias and (alias.group(1) or alias.group(2) in ptrs):
                        hosts.append(alias.group(1) or alias.group(2))  # an alias: same rule
                        continue
                    call = enclosing_call(body, m.start())
                    if call in HOST_SINKS or call in local_fns or call == "[":
                        continue  # a transfer, initial values, a checked helper; [ is an element
                    breach(m.start(), v, "host: host float buffer %s used %s" % (
                        v, "in %s()" % call if call else "outside a transfer"))
    for key in sorted({k for k in ALLOWED if k[0] in local_fns} - used, key=str):
        offences.append("stale allow-list entry %s: %s no longer breaks the rule there"
                        % (key, ALLOWED[key]))
    return offences


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    offences = check(sys.argv[1], sys.argv[2:])
    for o in offences:
        print("offence: " + o)
    sys.exit(1 if offences else 0)


if __name__ == "__main__":
    main()
