#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the kubewasm image, from its OCI layout tarball.

    python3 scripts/image-sbom.py OUT --archive IMAGE.oci.tar --tag REPO:TAG --binary-sbom BIN.cdx.json

The image is the SBOM's subject (a `container` component named by its
repository, tag and manifest digest). Every regular file of its layers is a
`file` component with its SHA-256 and size, and the kubewasm binary's file
depends on the crates scripts/sbom.py listed for it (BIN.cdx.json: its
components and dependency graph are taken as they are). scripts/release.sh
writes it beside the binary's SBOM. Needs Python 3 only.
"""

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
import uuid
from pathlib import Path


def blob(archive, digest):
    algo, hexdigest = digest.split(":", 1)
    data = archive.extractfile(f"blobs/{algo}/{hexdigest}").read()
    if hashlib.new(algo, data).hexdigest() != hexdigest:
        sys.exit(f"blob {digest} does not match its digest")
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--archive", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--binary-sbom", required=True)
    args = ap.parse_args()

    repo, _, tag = args.tag.rpartition(":")
    binary = json.loads(Path(args.binary_sbom).read_text())
    with tarfile.open(args.archive) as archive:
        index = json.loads(archive.extractfile("index.json").read())
        named = [m for m in index["manifests"]
                 if m.get("annotations", {}).get("org.opencontainers.image.ref.name") in (args.tag, tag)]
        if len(named) != 1:
            sys.exit(f"{args.archive}: index.json names {args.tag} {len(named)} times")
        digest = named[0]["digest"]
        manifest = json.loads(blob(archive, digest))
        files = {}
        for layer in manifest["layers"]:
            data = blob(archive, layer["digest"])
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                for member in t:
                    name = "/" + member.name.lstrip("./")
                    if member.isfile():
                        content = t.extractfile(member).read()
                        files[name] = (hashlib.sha256(content).hexdigest(), len(content))
                    elif name.rsplit("/", 1)[-1].startswith(".wh."):
                        files.pop(name.replace(".wh.", "", 1), None)

    image_ref = f"pkg:oci/{repo.rsplit('/', 1)[-1]}@{digest.replace(':', '%3A')}?repository_url={repo}&tag={tag}"
    root = binary["metadata"]["component"]
    components = []
    file_refs = []
    for name, (sha, size) in sorted(files.items()):
        ref = f"file:{name}"
        file_refs.append(ref)
        components.append({
            "type": "file", "bom-ref": ref, "name": name,
            "hashes": [{"alg": "SHA-256", "content": sha}],
            "properties": [{"name": "kubewasm:size", "value": str(size)}],
        })
    if "file:/kubewasm" not in file_refs:
        sys.exit(f"{args.archive}: the image has no /kubewasm")
    components.append(root)
    components.extend(binary.get("components", []))
    dependencies = [{"ref": image_ref, "dependsOn": file_refs},
                    {"ref": "file:/kubewasm", "dependsOn": [root["bom-ref"]]}]
    dependencies.extend(binary.get("dependencies", []))
    body = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, image_ref)),
        "version": 1,
        "metadata": {
            "timestamp": binary["metadata"]["timestamp"],
            "tools": {"components": [{"type": "application", "name": "kubewasm scripts/image-sbom.py"}]},
            "component": {
                "type": "container", "bom-ref": image_ref, "name": repo, "version": tag,
                "purl": image_ref,
                "hashes": [{"alg": "SHA-256", "content": digest.split(":", 1)[1]}],
            },
        },
        "components": components,
        "dependencies": dependencies,
    }
    out = Path(args.out)
    out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"{out}: CycloneDX 1.5, image {args.tag} ({digest}): {len(files)} files, "
          f"{len(binary.get('components', []))} crates of /kubewasm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
