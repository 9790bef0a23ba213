"""docs/protocol-spec.json, docs/protocol.md's numbers as data, against the document and against this package, and
conformance/cases.json against both: the document is the contract, the spec its data, and the package's constants
(``_wire``, ``errors``, ``_client.options``, ``_paths``) are held to the spec both ways, as ProtocolSpecTest holds the Java
ones and native/c/check_spec.py the C client's. No daemon needed."""

import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from engram_host import _paths, _wire, errors  # noqa: E402
from engram_host._client import options  # noqa: E402
from support import REPO, conformance_cases, protocol_spec  # noqa: E402

DOC = os.path.join(REPO, "docs", "protocol.md")

# Each limit of the spec that this client holds: the module, the constant's name, and the factor to the limit's unit.
HELD = {
    "pre_version_payload": (_wire, "MAX_PRE_VERSION_PAYLOAD", 1),
    "v2_payload": (_wire, "MAX_V2_PAYLOAD", 1),
    "v1_payload": (_wire, "MAX_V1_PAYLOAD", 1),
    "part_body": (_wire, "MAX_PART_BODY", 1),
    "frame": (_wire, "MAX_FRAME", 1),
    "fd_count": (_wire, "MAX_FDS", 1),
    "fds_per_sendmsg": (_wire, "FDS_PER_SENDMSG", 1),
    "str16": (_wire, "MAX_SHORT_STRING", 1),
    "hello_client": (_wire, "MAX_SHORT_STRING", 1),
    "device": (_wire, "MAX_DEVICE", 1),
    "fingerprint": (_wire, "MAX_FINGERPRINT", 1),
    "region_count": (_wire, "MAX_FDS", 1),
    "table_count": (_wire, "MAX_TABLES", 1),
    "table_name": (_wire, "MAX_SHORT_STRING", 1),
    "rank": (_wire, "MAX_RANK", 1),
    "error_message": (_wire, "MAX_MESSAGE", 1),
    "error_details": (_wire, "MAX_DETAILS", 1),
    "error_detail": (_wire, "MAX_DETAIL", 1),
    "answer_wait": (options, "DEFAULT_TIMEOUT", 1000),
    "retry_interval": (options, "NOT_READY_RETRY", 1000),
    "socket_path": (_paths, "MAX_PATH_BYTES", 1),
}
# The spec's limits of scope "wire" that this client does not hold, and why.
NOT_HELD = {
    "hello_payload": "the daemon's bound on what a client sends",
    "request_payload": "the daemon's bound on what a client sends",
    "empty_request_payload": "the daemon's bound on what a client sends",
    "handover_layout": "between two daemons",
    "handover_served": "between two daemons",
    "handover_connections": "between two daemons",
    "handover_report": "between two daemons",
}
# _wire's numeric constants and what of the spec each is: a limit, a framing number, a list of codes.
WIRE_CONSTANTS = {
    "MAGIC": "framing.magic", "MIN_VERSION": "framing.versions", "MAX_VERSION": "framing.versions",
    "HEADER_BYTES": "framing.frame_header_bytes", "CONTINUED": "framing.continued_bit", "FILLER": "framing.filler_byte",
    "HELLO": "message_types", "WELCOME": "message_types", "IMPORT": "message_types", "MANIFEST": "message_types",
    "STATUS": "message_types", "STATUS_REPLY": "message_types", "STOP": "message_types", "STOP_ACK": "message_types",
    "ERROR": "message_types", "BYE": "message_types", "PART": "message_types",
    "KIND_MEMFD": "region_kinds", "KIND_MEMFD_HUGETLB": "region_kinds", "KIND_VMM_HOST": "region_kinds",
    "KIND_VMM_DEVICE": "region_kinds",
}


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def renderings(value: int, unit: str) -> set:
    """How the document may write a value: 65536, 65,536, 64 KiB, 1 MiB, 16 MiB, 1 GiB; milliseconds as ms or s."""
    out = {str(value), f"{value:,}"}
    if unit == "ms":
        out.add(f"{value} ms")
        if value % 1000 == 0:
            out.add(f"{value // 1000} s")
    for shift, name in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if value >= 1 << shift and value % (1 << shift) == 0:
            out.add(f"{value >> shift} {name}")
    return out


class SpecAgainstTheDocumentTest(unittest.TestCase):
    """Every table and list of docs/protocol.md that the spec holds says what the spec says, and every limit's phrase
    is the document's, holding the limit's value."""

    @classmethod
    def setUpClass(cls):
        with open(DOC) as f:
            cls.doc = f.read()
        cls.flat = normalized(cls.doc)
        cls.spec = protocol_spec()

    def rows(self, header: str) -> list:
        """The rows of the document's table whose header line is ``header``, as lists of cells."""
        lines = self.doc.splitlines()
        start = lines.index(header) + 2
        rows = []
        for line in lines[start:]:
            if not line.startswith("|"):
                break
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        return rows

    def phrase(self, text: str) -> str:
        self.assertTrue(normalized(text) in self.flat, f"docs/protocol.md does not say {text!r}")
        return normalized(text)

    def test_message_types(self):
        rows = self.rows("| type | code | direction | fds |")
        doc = {r[0]: (r[1], r[2], r[3]) for r in rows if r[0] != "reserved"}
        spec = {t["name"]: (str(t["code"]), t["direction"], t["fds"]) for t in self.spec["message_types"]}
        self.assertEqual(spec, doc)
        reserved = self.spec["reserved_types"]
        self.assertIn(["reserved", f"{reserved['from']}-{reserved['to']}", reserved["direction"], "for later handover messages"],
                      rows)

    def test_error_codes(self):
        doc = {int(r[0]): r[1] for r in self.rows("| code | name | meaning |")}
        self.assertEqual({e["code"]: e["name"] for e in self.spec["error_codes"]}, doc)
        said = self.phrase(self.spec["error_retryable_doc"])
        self.assertEqual({e["name"] for e in self.spec["error_codes"] if e["retryable"]},
                         set(re.findall(r"[A-Z_]{3,}", said)))

    def test_numbered_lists(self):
        """Region kinds, states, expectation kinds and connection phases: 'N name, N name, ...' as the spec lists them."""
        for key in ("region_kinds", "daemon_states", "expectation_kinds", "connection_phases"):
            with self.subTest(key=key):
                said = self.phrase(self.spec[key + "_doc"])
                pairs = [re.match(r"(\d+) (.*?)(?: \(.*\)| not yet received)?$", p).groups() for p in said.split(", ")]
                self.assertEqual([(e["code"], e["name"].lower()) for e in self.spec[key]],
                                 [(int(n), name.lower()) for n, name in pairs])

    def test_dtypes(self):
        said = self.phrase(self.spec["dtypes_doc"])
        self.assertEqual([d["name"] for d in self.spec["dtypes"]], said.split(": ", 1)[1].split(", "))

    def test_framing(self):
        framing = self.spec["framing"]
        self.assertIn(f"0x{framing['magic']:08X}", self.phrase(framing["magic_doc"]))
        self.assertEqual(framing["magic"].to_bytes(4, "little"), framing["magic_text"].encode())
        self.assertIn(f"0x{framing['continued_bit']:04X}", self.phrase(framing["continued_doc"]))
        self.assertIn(f"0x{framing['filler_byte']:02X}", self.phrase(framing["filler_doc"]))
        self.assertIn("versions 1 and 2", self.flat)
        self.assertEqual([1, 2], framing["versions"])

    def test_every_limit_is_the_documents(self):
        names = [l["name"] for l in self.spec["limits"]]
        self.assertEqual(len(names), len(set(names)), "a limit named twice")
        for limit in self.spec["limits"]:
            with self.subTest(limit=limit["name"]):
                said = self.phrase(limit["doc"])
                self.assertIn(limit["scope"], ("wire", "daemon", "client"))
                written = {w for w in renderings(limit["value"], limit["unit"])
                           if re.search(r"(?<![\d.])(?<!\d,)" + re.escape(w) + r"(?!\d|,\d)", said)}
                self.assertTrue(written, f"{limit['doc']!r} does not hold {limit['value']} {limit['unit']}")

    def test_manifest_checks(self):
        rows = self.rows("| # | check | refused when | Java | Python | C |")
        self.assertEqual([(c["id"], c["check"]) for c in self.spec["manifest_checks"]],
                         [(int(r[0]), r[1]) for r in rows])
        cases = {c["name"]: c for c in conformance_cases()}
        section = self.doc[self.doc.index("**What a client checks.**"):self.doc.index("How to map a region:")]
        everywhere = set()
        for r in rows:
            named = {n.strip() for b in re.findall(r"\[([a-z0-9, -]+)\]", r[2]) for n in b.split(",")}
            everywhere |= named
            for n in named:
                with self.subTest(check=r[0], case=n):
                    self.assertTrue(n in cases, f"the document names {n}, a case conformance/cases.json lacks")
                    self.assertEqual(int(r[0]), cases[n]["check"])
        everywhere |= {n.strip() for b in re.findall(r"\[([a-z0-9, -]+)\]", section) for n in b.split(",")}
        checked = {n for n, c in cases.items() if c["check"] is not None}
        self.assertEqual(set(), checked - everywhere, "cases of a check the document's table does not name")

    def test_the_document_names_the_spec(self):
        self.assertIn("[protocol-spec.json](protocol-spec.json)", self.doc)


class WireAgainstTheSpecTest(unittest.TestCase):
    """The package's constants against the spec, both ways."""

    @classmethod
    def setUpClass(cls):
        cls.spec = protocol_spec()

    def test_message_types(self):
        spoken = {t["code"]: t["name"] for t in self.spec["message_types"] if t["peers"] == "client"}
        self.assertEqual(spoken, _wire.TYPE_NAMES)
        for code, name in spoken.items():
            self.assertEqual(code, getattr(_wire, name))

    def test_region_kinds_states_and_expectations(self):
        self.assertEqual({k["code"]: k["backend"] for k in self.spec["region_kinds"]}, _wire.KIND_BACKENDS)
        self.assertEqual([_wire.KIND_MEMFD, _wire.KIND_MEMFD_HUGETLB, _wire.KIND_VMM_HOST, _wire.KIND_VMM_DEVICE],
                         [k["code"] for k in self.spec["region_kinds"]])
        self.assertEqual({s["code"]: s["name"] for s in self.spec["daemon_states"]}, _wire.STATES)
        self.assertEqual({e["code"]: e["name"].upper() for e in self.spec["expectation_kinds"]},
                         {k.value: k.name for k in _wire.ExpectationKind})

    def test_error_codes(self):
        self.assertEqual({e["code"]: e["name"] for e in self.spec["error_codes"]},
                         {c.value: c.name for c in errors.ErrorCode})
        self.assertEqual({e["code"]: e["name"] for e in self.spec["error_codes"]},
                         {code: cls.name for code, cls in errors.BY_CODE.items()})

    def test_dtypes(self):
        self.assertEqual({d["name"]: d["bits"] for d in self.spec["dtypes"]}, _wire.DTYPE_BITS)
        self.assertEqual([d["name"] for d in self.spec["dtypes"]], list(_wire.DTYPE_BITS))

    def test_framing(self):
        f = self.spec["framing"]
        self.assertEqual((f["magic"], f["frame_header_bytes"], f["continued_bit"], f["filler_byte"]),
                         (_wire.MAGIC, _wire.HEADER_BYTES, _wire.CONTINUED, _wire.FILLER))
        self.assertEqual(f["versions"], list(range(_wire.MIN_VERSION, _wire.MAX_VERSION + 1)))

    def test_limits(self):
        limits = {l["name"]: l for l in self.spec["limits"]}
        for name, (module, constant, factor) in HELD.items():
            with self.subTest(limit=name):
                self.assertIn(name, limits)
                self.assertEqual(limits[name]["value"], getattr(module, constant) * factor, constant)
        wire = {n for n, l in limits.items() if l["scope"] in ("wire", "client")}
        self.assertEqual(set(), wire - set(HELD) - set(NOT_HELD), "limits of the spec this client neither holds nor "
                                                                    "says why not")
        self.assertEqual(set(), set(NOT_HELD) & set(HELD))

    def test_every_numeric_constant_of_wire_is_the_specs(self):
        named = set(WIRE_CONSTANTS) | {constant for module, constant, _ in HELD.values() if module is _wire}
        unnamed = [n for n, v in vars(_wire).items() if n.isupper() and isinstance(v, int) and n not in named]
        self.assertEqual([], unnamed, "constants of _wire docs/protocol-spec.json does not name")


class CasesAgainstTheSpecTest(unittest.TestCase):
    """conformance/cases.json is well formed: names unique, fields known, checks the spec's, sections the document's,
    every refused case an expectation or a stated skip for each client."""

    FIELDS = {"name", "peer", "does", "doc", "check", "outcome", "accepted", "error", "options", "requires", "within_s",
              "peer_says", "java", "python", "c"}
    CLIENT_FIELDS = {"says", "is", "raises", "attrs", "lengths", "args", "output", "skip", "options"}

    def test_cases(self):
        spec = protocol_spec()
        with open(DOC) as f:
            headings = {line.lstrip("#").strip() for line in f if line.startswith("#")}
        ids = {c["id"] for c in spec["manifest_checks"]}
        names = set()
        for case in conformance_cases():
            with self.subTest(case=case["name"]):
                self.assertNotIn(case["name"], names)
                names.add(case["name"])
                self.assertEqual(set(), set(case) - self.FIELDS)
                self.assertIn(case["outcome"], ("accepted", "refused"))
                self.assertTrue(case["check"] is None or case["check"] in ids, case["check"])
                self.assertTrue(case["doc"] is None or case["doc"] in headings, case["doc"])
                if case["check"] is not None:
                    self.assertEqual("refused", case["outcome"])
                for client_name in ("java", "python", "c"):
                    mine = case.get(client_name, {})
                    self.assertEqual(set(), set(mine) - self.CLIENT_FIELDS)
                    if case["outcome"] == "refused":
                        self.assertTrue({"says", "is", "skip"} & set(mine), f"{client_name}: no expectation, no skip")
                    elif "skip" not in mine:
                        self.assertTrue("accepted" in case or "output" in mine, f"{client_name}: nothing to check")
                    if "skip" in mine:
                        self.assertTrue(mine["skip"].strip(), "a skip states its reason")
                if "error" in case and case["error"]["code"] in {e["code"] for e in spec["error_codes"]}:
                    self.assertEqual("refused", case["outcome"])


if __name__ == "__main__":
    unittest.main()
