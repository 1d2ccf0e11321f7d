#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the kubewasm binary the image ships.

    python3 scripts/sbom.py OUT [--target TRIPLE] [--features F,...]

The crates are what cargo resolves for that very build (`cargo build -p
kubewasm --target x86_64-unknown-linux-musl --features jemalloc`, as
scripts/image.sh runs it), read from `cargo tree`: its normal dependencies
(proc-macros included) with scope `required`, and the crates only build
scripts use with scope `excluded` (they run at build time and are not linked
in). Each component carries its licence, its crates.io checksum from
Cargo.lock (the SHA-256 cargo verifies), its purl, and the dependency graph.

Why not cargo-cyclonedx: 0.5.9 resolves features over the whole workspace
and evaluates optional target dependencies on its own, so for this build it
listed 16 crates that are not compiled in and missed 3 that are (stacker,
psm, ar_archive_writer). cargo tree is cargo's own resolver.

Reads back what it wrote and checks it (every crate of the build listed
once, as Cargo.lock names it, with a purl and, for crates.io crates, a
checksum), prints a summary line, and exits non-zero if a check fails.
scripts/supply-chain.sh also validates it against the CycloneDX 1.5 JSON
schema. Needs Python 3.11 (tomllib) and cargo.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def cargo_tree(target, features, edges):
    """(depth, name, version, is_local, licence) per line of `cargo tree`."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "-p", "kubewasm", "--target", target,
         "--features", features, "-e", edges, "--prefix", "depth",
         "--format", "{p}|{l}"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        digits = len(line) - len(line.lstrip("0123456789"))
        if digits == 0:
            continue
        depth = int(line[:digits])
        package, _, licence = line[digits:].partition("|")
        licence = licence.removesuffix(" (*)").strip()
        package = package.removesuffix(" (*)")
        name, version, *rest = package.split(" ")
        is_local = any(r.startswith("(/") for r in rest)
        rows.append((depth, name, version.removeprefix("v"), is_local, licence))
    return rows


def spdx(licence):
    # Old manifests separate alternatives with "/", which SPDX spells OR.
    return " OR ".join(part.strip() for part in licence.split("/")) if licence else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--target", default="x86_64-unknown-linux-musl")
    ap.add_argument("--features", default="jemalloc")
    args = ap.parse_args()

    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    locked = {(p["name"], p["version"]): p for p in lock["package"]}

    everything = cargo_tree(args.target, args.features, "normal,build")
    linked = {(n, v) for _, n, v, _, _ in cargo_tree(args.target, args.features, "normal")}

    def ref(name, version):
        return f"pkg:cargo/{name}@{version}"

    components, edges, parents = {}, {}, []
    for depth, name, version, is_local, licence in everything:
        del parents[depth:]
        key = (name, version)
        if parents:
            edges.setdefault(parents[-1], set()).add(ref(*key))
        parents.append(ref(*key))
        edges.setdefault(ref(*key), set())
        if depth == 0 or key in components:
            continue
        entry = locked.get(key, {})
        component = {
            "type": "library",
            "bom-ref": ref(*key),
            "name": name,
            "version": version,
            "scope": "required" if key in linked else "excluded",
            "purl": ref(*key),
        }
        if licence:
            component["licenses"] = [{"expression": spdx(licence)}]
        if entry.get("checksum"):
            component["hashes"] = [{"alg": "SHA-256", "content": entry["checksum"]}]
        if is_local or entry.get("source") not in (None, CRATES_IO):
            component["properties"] = [{"name": "kubewasm:source",
                                        "value": entry.get("source") or "path"}]
        components[key] = component

    root = everything[0]
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch
           else datetime.datetime.now(datetime.timezone.utc))
    listed = sorted(components.values(), key=lambda c: (c["name"], c["version"]))
    body = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "kubewasm scripts/sbom.py"}]},
            "component": {
                "type": "application",
                "bom-ref": ref(root[1], root[2]),
                "name": root[1],
                "version": root[2],
                "purl": ref(root[1], root[2]),
                "licenses": [{"expression": spdx(root[4])}],
            },
            "properties": [
                {"name": "cdx:rust:target", "value": args.target},
                {"name": "kubewasm:features", "value": args.features},
            ],
        },
        "components": listed,
        "dependencies": [{"ref": r, "dependsOn": sorted(d)} for r, d in sorted(edges.items())],
    }
    # The same crates give the same serial number.
    body["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(
        uuid.NAMESPACE_URL, json.dumps(listed, sort_keys=True)))

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    tmp.replace(out)

    # Read back what was written and check it against the build's crates.
    written = json.loads(out.read_text())
    problems = []
    names = {(c["name"], c["version"]) for c in written["components"]}
    expected = {(n, v) for d, n, v, _, _ in everything if d > 0}
    if names != expected:
        problems.append(f"listed crates differ from the build's: missing {sorted(expected - names)[:5]}, "
                        f"extra {sorted(names - expected)[:5]}")
    if len(written["components"]) != len(names):
        problems.append("a crate is listed twice")
    for c in written["components"]:
        if (c["name"], c.get("version")) not in locked:
            problems.append(f"{c['name']} {c.get('version')}: not in Cargo.lock")
        if not c.get("version") or not c.get("purl"):
            problems.append(f"{c['name']}: no version or purl")
        if locked.get((c["name"], c["version"]), {}).get("source") == CRATES_IO and not c.get("hashes"):
            problems.append(f"{c['name']} {c['version']}: no checksum")
    if problems:
        for p in problems:
            print(f"error: {out}: {p}", file=sys.stderr)
        return 1
    required = sum(c["scope"] == "required" for c in written["components"])
    unlicensed = sum("licenses" not in c for c in written["components"])
    print(f"{out}: CycloneDX 1.5, {root[1]} {root[2]} for {args.target} (features {args.features}): "
          f"{required} crates built in, {len(names) - required} used only by build scripts, "
          f"{unlicensed} without a licence field")
    return 0


if __name__ == "__main__":
    sys.exit(main())
