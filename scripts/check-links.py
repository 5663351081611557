#!/usr/bin/env python3
"""Every relative link and image path in the given Markdown files resolves:
the file or folder exists, and an anchor (#x) names a heading of the target
(GitHub's slugs).  Prints each broken one; exit 1 if any.  From the
repository root, after moving text between the README and docs/:

    python3 scripts/check-links.py README.md docs/*.md docs/*/*.md
"""
import os, re, sys
LINK = re.compile(r'\]\(([^)\s]+)\)')

def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')

def anchors(path):
    out, fence = set(), False
    for l in open(path):
        if l.startswith('```'):
            fence = not fence
        m = re.match(r'^#+ (.*)', l)
        if m and not fence:
            out.add(slug(m.group(1)))
    return out

bad = n = 0
for md in sys.argv[1:]:
    d = os.path.dirname(md) or '.'
    fence = False
    for ln, line in enumerate(open(md), 1):
        if line.startswith('```'):
            fence = not fence
        if fence:
            continue
        for t in LINK.findall(line):
            if re.match(r'^[a-z]+:', t):
                continue
            n += 1
            path, _, anchor = t.partition('#')
            target = os.path.normpath(os.path.join(d, path)) if path else md
            ok = os.path.exists(target)
            if ok and anchor:
                ok = target.endswith('.md') and slug(anchor) == anchor and anchor in anchors(target)
            if not ok:
                bad += 1
                print('%s:%d: %s' % (md, ln, t))
print('%d relative links in %d files, %d broken' % (n, len(sys.argv) - 1, bad))
sys.exit(1 if bad else 0)
