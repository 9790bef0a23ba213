"""Socket path resolution (docs/protocol.md, "Socket path"): the same answers as the Java CLI's SocketPaths."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engram_host import _paths  # noqa: E402


class TemplateTest(unittest.TestCase):
    def test_flag_then_environment_then_default(self):
        env = {"ENGRAM_HOST_SOCKET": "/e/{instance}.sock", "XDG_RUNTIME_DIR": "/run/user/1000"}
        self.assertEqual("/f.sock", _paths.template("/f.sock", env, 1000))
        self.assertEqual("/e/{instance}.sock", _paths.template(None, env, 1000))
        self.assertEqual("/e/{instance}.sock", _paths.template("  ", env, 1000))  # blank flag counts as unset
        self.assertEqual("/run/user/1000/engram-host/{instance}.sock",
                         _paths.template(None, {"ENGRAM_HOST_SOCKET": " ", "XDG_RUNTIME_DIR": "/run/user/1000"}, 1000))

    def test_defaults_by_euid(self):
        self.assertEqual("/run/engram-host/{instance}.sock", _paths.default_template(0, {"XDG_RUNTIME_DIR": "/x"}))
        self.assertEqual("/run/user/5/engram-host/{instance}.sock",
                         _paths.default_template(5, {"XDG_RUNTIME_DIR": "/run/user/5///"}))
        self.assertEqual("/engram-host/{instance}.sock", _paths.default_template(5, {"XDG_RUNTIME_DIR": "/"}))
        for bad in ("relative/dir", "/with/{brace}", "/with}", ""):
            self.assertEqual("/tmp/engram-host-5/{instance}.sock",
                             _paths.default_template(5, {"XDG_RUNTIME_DIR": bad}), bad)
        self.assertEqual("/tmp/engram-host-4294967294/{instance}.sock", _paths.default_template(4294967294, {}))


class ResolveTest(unittest.TestCase):
    def test_placeholders(self):
        self.assertEqual("/r/default.sock", _paths.resolve("/r/{instance}.sock"))
        self.assertEqual("/r/a-1.b_c.sock", _paths.resolve("/r/{instance}.sock", "a-1.b_c"))
        self.assertEqual("/r/gpu3.sock", _paths.resolve("/r/gpu{device}.sock", None, 3))
        self.assertEqual("/r/GPU-x.sock", _paths.resolve("/r/{device_uuid}.sock", None, 2, lambda d: "GPU-x"))

    def test_refusals_name_the_problem(self):
        cases = [
            (("/r/{instance}.sock", "a/b"), "--instance 'a/b' may hold only letters, digits, '.', '_' and '-'"),
            (("/r/{device}.sock",), "socket template '/r/{device}.sock' uses {device} but no --device was given"),
            (("/r/{device_uuid}.sock",), "uses {device_uuid} but no --device was given"),
            (("/r/{gpu}.sock",), "unknown placeholder {gpu}; known: {instance}, {device}, {device_uuid}"),
            (("r/{instance}.sock",), "socket path 'r/default.sock' must be absolute"),
            (("/" + "x" * 107,), "is longer than 107 bytes, the limit of a Unix socket address"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                with self.assertRaises(ValueError) as cm:
                    _paths.resolve(*args)
                self.assertIn(message, str(cm.exception))
        self.assertEqual("/" + "x" * 106, _paths.resolve("/" + "x" * 106))  # 107 bytes fit
        with self.assertRaises(ValueError):
            _paths.resolve("/" + "é" * 54)  # 109 bytes of UTF-8 in 55 characters


if __name__ == "__main__":
    unittest.main()


class SystemFallbackTest(unittest.TestCase):
    """A user with no socket at their own default is sent to the system daemon's, when it exists, and told so."""

    def test_falls_back_to_the_system_path_only_when_its_own_default_is_absent(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to place a socket file under /run/engram-host")
        instance = f"fallback-test-{os.getpid()}"
        made_dir = not os.path.isdir("/run/engram-host")
        os.makedirs("/run/engram-host", exist_ok=True)
        system = f"/run/engram-host/{instance}.sock"
        with tempfile.TemporaryDirectory() as xdg:
            env = {"XDG_RUNTIME_DIR": xdg}
            own = f"{xdg}/engram-host/{instance}.sock"
            self.assertEqual(own, _paths.for_client(None, env, 4242, instance), "no system socket: its own default")
            with open(system, "w"):
                pass
            try:
                with self.assertLogs("engram_host", "WARNING") as logs:
                    self.assertEqual(system, _paths.for_client(None, env, 4242, instance))
                self.assertEqual([f"no daemon socket at {own} (this user's default): using the system daemon's "
                                  f"{system} (--socket or ENGRAM_HOST_SOCKET chooses another)"],
                                 [r.getMessage() for r in logs.records])
                self.assertEqual(own, _paths.for_client(own, env, 4242, instance), "a path given is kept")
                self.assertEqual(own, _paths.for_client(None, {**env, "ENGRAM_HOST_SOCKET": own}, 4242, instance))
                self.assertEqual(system, _paths.for_client(None, env, 0, instance), "root's default is the system's")
                os.makedirs(os.path.dirname(own))
                with open(own, "w"):
                    pass
                self.assertEqual(own, _paths.for_client(None, env, 4242, instance), "its own socket exists")
            finally:
                os.unlink(system)
                if made_dir:
                    os.rmdir("/run/engram-host")
