#!/usr/bin/env python3
"""The licences of every third-party jar the release bundles (scripts/release/dist.sh).

Usage: scripts/release/third-party.py DEPENDENCIES LIB_DIR OUT_DIR

DEPENDENCIES is the cli module's runtime dependency list (engram-host/cli/target/app-dependencies.txt, written by
maven-dependency-plugin's list goal at package). For each artifact it reads the licences its POM declares (walking
up the parent POMs in the local Maven repository, $M2_REPO or ~/.m2/repository), copies the licence and notice
files the jar itself carries (META-INF/LICENSE*, NOTICE*, COPYING*, licenses/*), and adds the text of each
declared licence from scripts/release/licenses/ (texts taken from Maven Central artifacts; their README says which).
Writes OUT_DIR/THIRD-PARTY.txt (artifact, version, licences, files) and OUT_DIR/<artifact>-<version>/..., and
OUT_DIR/texts/<SPDX>.txt. Fails when an artifact declares no licence, or only licences with no text here.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET
import zipfile

TEXTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "licenses")
NS = {"m": "http://maven.apache.org/POM/4.0.0"}

# The licence names (and URLs) found in the POMs, mapped to SPDX ids; an unknown one fails the build so that a new
# dependency's licence is looked at before it ships.
SPDX = [
    (r"apache.*2|apache-2\.0|licenses/LICENSE-2\.0", "Apache-2.0"),
    (r"eclipse public license.*2|epl-2\.0|\bepl 2", "EPL-2.0"),
    (r"lesser general public license.*2\.1|lgpl.*2\.1", "LGPL-2.1-only"),
    (r"lesser general public license.*3|lgpl.*3", "LGPL-3.0-only"),
    (r"general public license.*2|gpl.*2", "GPL-2.0-only"),
    (r"\bmit\b", "MIT"),
    (r"bsd-3-clause|bsd 3|asm\.ow2\.io/license|\bbsd\b", "BSD-3-Clause"),
]


def spdx(name, url):
    text = f"{name or ''} {url or ''}".lower()
    for pattern, ident in SPDX:
        if re.search(pattern, text):
            return ident
    return None


def pom_path(repo, g, a, v):
    return os.path.join(repo, *g.split("."), a, v, f"{a}-{v}.pom")


def licences(repo, g, a, v):
    """The <licenses> of the POM of g:a:v, or of its nearest parent that declares some."""
    seen = set()
    while (g, a, v) not in seen:
        seen.add((g, a, v))
        path = pom_path(repo, g, a, v)
        if not os.path.exists(path):
            raise SystemExit(f"third-party: {g}:{a}:{v}: no POM at {path}")
        root = ET.parse(path).getroot()
        ns = NS if root.tag.startswith("{") else {"m": ""}
        q = (lambda p: p.replace("m:", "")) if ns["m"] == "" else (lambda p: p)
        found = [(l.findtext(q("m:name"), namespaces=ns), l.findtext(q("m:url"), namespaces=ns))
                 for l in root.findall(q("m:licenses/m:license"), ns)]
        if found:
            return [(n.strip() if n else "", u.strip() if u else "") for n, u in found]
        parent = root.find(q("m:parent"), ns)
        if parent is None:
            break
        g, a, v = (parent.findtext(q("m:" + k), namespaces=ns).strip() for k in ("groupId", "artifactId", "version"))
    raise SystemExit(f"third-party: {g}:{a}: no licence declared in its POM or its parents")


def main():
    deps_file, lib, out = sys.argv[1:4]
    repo = os.environ.get("M2_REPO") or os.path.expanduser("~/.m2/repository")
    os.makedirs(os.path.join(out, "texts"), exist_ok=True)
    rows = []
    for line in open(deps_file, encoding="utf-8"):
        m = re.match(r"\s+([\w.\-]+):([\w.\-]+):jar(?::([\w.\-]+))?:([\w.\-]+):(compile|runtime)\b", line)
        if not m:
            continue
        g, a, classifier, v, _ = m.groups()
        if g == "io.engramhost":
            continue
        jar = os.path.join(lib, f"{a}-{v}" + (f"-{classifier}" if classifier else "") + ".jar")
        if not os.path.exists(jar):
            raise SystemExit(f"third-party: {jar} is listed but not bundled")
        declared = licences(repo, g, a, v)
        ids = []
        for name, url in declared:
            ident = spdx(name, url)
            if ident is None:
                raise SystemExit(f"third-party: {g}:{a}:{v}: licence '{name}' ({url}) is not known here: add it to"
                                 " scripts/release/third-party.py and its text to scripts/release/licenses/")
            ids.append(ident)
        files = []
        own = os.path.join(out, f"{a}-{v}" + (f"-{classifier}" if classifier else ""))
        with zipfile.ZipFile(jar) as z:
            for n in z.namelist():
                base = n.rsplit("/", 1)[-1]
                if n.endswith("/") or not (n.startswith("META-INF/") and
                                            re.match(r"(?i)(licen[cs]e|notice|copying|al2\.0|lgpl|gpl|epl)", base)
                                            or n.startswith("META-INF/licenses/")):
                    continue
                os.makedirs(own, exist_ok=True)
                target = os.path.join(own, n.replace("META-INF/", "").replace("/", "_"))
                with open(target, "wb") as f:
                    f.write(z.read(n))
                files.append(os.path.relpath(target, out))
        texts = []
        for ident in dict.fromkeys(ids):
            src = os.path.join(TEXTS, ident + ".txt")
            if os.path.exists(src):
                dst = os.path.join(out, "texts", ident + ".txt")
                with open(src, "rb") as s, open(dst, "wb") as d:
                    d.write(s.read())
                texts.append(os.path.relpath(dst, out))
        if not texts and not files:
            raise SystemExit(f"third-party: {g}:{a}:{v} ({', '.join(ids)}): no licence text bundled or in scripts/release/licenses/")
        rows.append((f"{g}:{a}" + (f":{classifier}" if classifier else ""), v, ids, [n for n, _ in declared],
                     files + texts, jar))
    covered = {os.path.basename(r[5]) for r in rows}
    unlisted = sorted(j for j in os.listdir(lib) if j.endswith(".jar") and not j.startswith("engram-") and j not in covered)
    if unlisted:
        raise SystemExit(f"third-party: bundled but not in {deps_file}: {', '.join(unlisted)}")
    with open(os.path.join(out, "THIRD-PARTY.txt"), "w", encoding="utf-8") as f:
        f.write("Third-party software bundled in this release (the jars in app/lib), with the licences their POMs on\n"
                "Maven Central declare. Where several are declared, the artifact is offered under any of them. The\n"
                "texts are in texts/; files an artifact ships in its own jar are in the directory named after it.\n"
                "The Java runtime (runtime/) is OpenJDK: GPL-2.0 with the Classpath Exception, see runtime/legal/.\n\n")
        for coords, v, ids, names, files, _ in sorted(rows):
            f.write(f"{coords} {v}\n  licence: {' OR '.join(ids)}  ({'; '.join(names)})\n")
            f.write("".join(f"  file:    {p}\n" for p in files))
            f.write("\n")
    print(f"third-party: {len(rows)} artifacts, licences {sorted({i for r in rows for i in r[2]})}")


if __name__ == "__main__":
    main()
