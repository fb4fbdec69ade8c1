#!/usr/bin/env python3
"""Lists the Swift functions and initialisers longer than a bound (default 60 lines), longest
first, and whether a one-line reason (a comment containing "Over 60 lines") stands in the comment
block above each. Issue 31: no function over 60 lines without such a reason.

Usage: scripts/long-functions.py [DIR=Sources] [LIMIT=60]
It reads text only (braces in string literals and // comments are skipped), so it is a count to
look at, not a parser."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "Sources"
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 60
modifiers = r"(?:public|package|private|fileprivate|internal|static|class|override|mutating|nonmutating|nonisolated|final|convenience|required)"
declaration = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:" + modifiers + r"\s+)*(func\s+[^\s(<]+|init[?!]?|deinit)\b")
rows = []
for directory, _, files in os.walk(root):
    for name in files:
        if not name.endswith(".swift"):
            continue
        path = os.path.join(directory, name)
        lines = open(path, encoding="utf-8").read().split("\n")
        for start, line in enumerate(lines):
            match = declaration.match(line)
            if not match:
                continue
            depth, opened, end = 0, False, None
            for index in range(start, min(len(lines), start + 2000)):
                text = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[index]).split("//")[0]
                for character in text:
                    if character == "{":
                        depth, opened = depth + 1, True
                    elif character == "}":
                        depth -= 1
                if opened and depth <= 0:
                    end = index
                    break
                if not opened and index > start + 15:
                    break
            if end is None or end - start + 1 <= limit:
                continue
            above = start - 1
            while above >= 0 and lines[above].strip().startswith("@"):
                above -= 1
            reason = False
            while above >= 0 and lines[above].strip().startswith("//"):
                reason = reason or "over 60 lines" in lines[above].lower()
                above -= 1
            rows.append((end - start + 1, path, start + 1, match.group(1), reason))
rows.sort(key=lambda row: (-row[0], row[1]))
for length, path, line, name, reason in rows:
    print(f"{length:4d} {path}:{line} {name}{'  (reason given)' if reason else ''}")
print(f"{len(rows)} functions over {limit} lines, {sum(1 for row in rows if not row[4])} without a reason line")
