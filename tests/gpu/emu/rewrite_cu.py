#!/usr/bin/env python3
"""gpu-emu: a .cu file as host C++ for the emulator, line for line.

    rewrite_cu.py SOURCE.cu OUTPUT.cc [DISPLAY_PATH]

Two constructs only nvcc parses are rewritten, each on the lines it
occupies (so compiler messages and the emulator's reports name the .cu
file's own lines; a #line directive opens the output):

  KERNEL<<<grid, block[, smem[, stream]]>>>(args)
      -> ::mt_emu::launch_of(KERNEL, "KERNEL", __FILE__, __LINE__, grid, block, ...)(args)
  __shared__ T name[N];   (a per-block variable)
      -> static ::mt_emu::shared_site s; auto &name = ::mt_emu::shared_var<T[N]>(s, ...);
  extern __shared__ T name[];   (the launch's dynamic shared memory)
      -> T *name = ::mt_emu::shared_dynamic<T>();

Everything else (built-in indices, barriers, shuffles) is ordinary C++ once
mt_emu_device.h is included. Comments and string literals are left alone.
"""
import re
import sys


def code_mask(text):
    """A list of booleans: True where text[i] is code (not a comment or a
    string or character literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                mask[k] = False
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i, j):
                mask[k] = False
            i = j
        else:
            i += 1
    return mask


def kernel_start(text, end):
    """Start of the kernel expression ending at end (exclusive): an
    identifier (with ::) optionally followed by balanced template
    arguments."""
    i = end
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    if i > 0 and text[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            raise ValueError("unbalanced template arguments before <<<")
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text):
    mask = code_mask(text)
    out, pos = [], 0
    while True:
        k = text.find("<<<", pos)
        while k >= 0 and not mask[k]:
            k = text.find("<<<", k + 3)
        if k < 0:
            break
        e = text.find(">>>", k + 3)
        if e < 0:
            raise ValueError("<<< without >>> at offset %d" % k)
        s = kernel_start(text, k)
        kernel = text[s:k].strip()
        if not kernel:
            raise ValueError("no kernel before <<< at line %d" % (text.count("\n", 0, k) + 1))
        config = text[k + 3:e]
        name = kernel.replace("\\", "\\\\").replace('"', '\\"')
        out.append(text[pos:s])
        out.append('::mt_emu::launch_of(%s, "%s", __FILE__, __LINE__, %s)' % (kernel, name, config))
        pos = e + 3
    out.append(text[pos:])
    return "".join(out)


SHARED = re.compile(
    r"(?P<ext>\bextern\s+)?__shared__\s+(?P<type>[A-Za-z_][\w:<>, ]*?[\w>])\s+"
    r"(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\];]*\])*)\s*;")


def rewrite_shared(text):
    mask = code_mask(text)
    count = [0]

    def repl(m):
        if not mask[m.start()]:
            return m.group(0)
        ty, name, dims = m.group("type").strip(), m.group("name"), m.group("dims")
        if m.group("ext"):
            if dims.replace(" ", "") != "[]":
                raise ValueError("extern __shared__ %s must be an array of unknown size" % name)
            return "%s *%s = ::mt_emu::shared_dynamic<%s>();" % (ty, name, ty)
        count[0] += 1
        site = "mt_emu_shared_site_%d" % count[0]
        return ("static ::mt_emu::shared_site %s; auto &%s = ::mt_emu::shared_var<%s%s>(%s, "
                "__FILE__, __LINE__);" % (site, name, ty, dims, site))

    return SHARED.sub(repl, text)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    shown = sys.argv[3] if len(sys.argv) == 4 else src
    text = open(src).read()
    try:
        body = rewrite_shared(rewrite_launches(text))
    except ValueError as e:
        sys.exit("%s: %s" % (src, e))
    if body.count("\n") != text.count("\n"):
        sys.exit("%s: the rewrite changed the number of lines" % src)
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % shown)
        f.write(body)


if __name__ == "__main__":
    main()
