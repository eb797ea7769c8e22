#!/usr/bin/env python3
"""Each store's files call one way: for every folder given, which of its .c
files calls a function (or names a table) another of them defines; the
calls must form layers, with no circle.  Prints the edges of a folder with
a circle, and exits 1.

Usage: check-layers.py DIR...
"""
import os
import re
import sys

DEF = re.compile(r'^(?!static)[A-Za-z_][\w \*]*?\b([a-z_][a-z0-9_]*)\s*'
                 r'\([^;{]*\)\s*\{', re.M)
TABLE = re.compile(r'^(?:const )?struct \w+ (\w+)\s*=', re.M)
COMMENT = re.compile(r'/\*.*?\*/', re.S)


def edges_of(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith('.c'))
    text = {f: open(os.path.join(folder, f)).read() for f in files}
    where = {}
    for f in files:
        for m in DEF.finditer(text[f]):
            where.setdefault(m.group(1), f)
        for m in TABLE.finditer(text[f]):
            where.setdefault(m.group(1), f)
    edges = {}
    for f in files:
        code = COMMENT.sub('', text[f])
        words = set(re.findall(r'\b[a-z_][a-z0-9_]*\b', code))
        edges[f] = sorted({where[w] for w in words
                           if w in where and where[w] != f})
    return edges


def circle(edges):
    """One circle of the graph, or None."""
    state = {}

    def visit(u, path):
        state[u] = 1
        for v in edges[u]:
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if not state.get(v):
                found = visit(v, path + [v])
                if found:
                    return found
        state[u] = 2
        return None

    for u in edges:
        if not state.get(u):
            found = visit(u, [u])
            if found:
                return found
    return None


def main():
    bad = 0
    for folder in sys.argv[1:]:
        edges = edges_of(folder)
        found = circle(edges)
        if found:
            bad = 1
            print('FAIL: %s: %s' % (folder, ' -> '.join(found)))
            for f, to in edges.items():
                print('    %s -> %s' % (f, ', '.join(to) or '-'))
        else:
            print('ok: %s: %d files in layers' % (folder, len(edges)))
    return bad


if __name__ == '__main__':
    sys.exit(main())
