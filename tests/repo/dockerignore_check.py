#!/usr/bin/env python3
"""Every .gitignore pattern has its counterpart in .dockerignore (a root-anchored "/x/" as "x", an unanchored
"x/" as "**/x"), so what git never tracks never enters the Docker build context either. Exit 1 naming what is
missing."""
import os
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def patterns(name):
    lines = open(os.path.join(root, name), encoding="utf-8").read().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]


def docker_form(git_pattern):
    p = git_pattern.rstrip("/")
    return p[1:] if p.startswith("/") else "**/" + p


have = set(patterns(".dockerignore"))
missing = [g for g in patterns(".gitignore") if docker_form(g) not in have]
if missing:
    print(".dockerignore lacks the counterparts of these .gitignore lines: " +
          ", ".join(f"{g} (as {docker_form(g)})" for g in missing), file=sys.stderr)
    sys.exit(1)
print(f"{len(patterns('.gitignore'))} .gitignore patterns all in .dockerignore")
