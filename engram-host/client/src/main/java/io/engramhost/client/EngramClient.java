package io.engramhost.client;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.NativeException;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.Posix;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import io.engramhost.protocol.ErrorCode;
import io.engramhost.protocol.ErrorReply;
import io.engramhost.protocol.Expectation;
import io.engramhost.protocol.Frames;
import io.engramhost.protocol.Hello;
import io.engramhost.protocol.ImportRequest;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.MessageType;
import io.engramhost.protocol.ProtocolChannel;
import io.engramhost.protocol.ProtocolDescriptor;
import io.engramhost.protocol.Welcome;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The client library's entry points: import tables, ask for status, stop a daemon. */
public final class EngramClient {
    private EngramClient() {
    }

    /**
     * Connects to the daemon at {@code socket}, checks {@code expectation}, receives the manifest and
     * fds and maps every host table read-only. The connection stays open as the lease.
     *
     * @throws DaemonAbsentException when no socket exists at the path (a caller may load from disk)
     * @throws EngramClientException on a refusal, a mismatch, "not ready" past the wait, or a timeout
     */
    public static ImportedTables connect(Path socket, Expectation expectation, ClientOptions options) {
        long t0 = System.nanoTime();
        Warmup.start();
        GpuPreparation gpu = options.gpuView() ? GpuPreparation.start(options.device()) : null;
        Posix.raiseNoFileLimit(); // the first native call of a process also loads the bindings
        long tInit = System.nanoTime();
        Connected c;
        try {
            c = handshake(socket, options);
        } catch (RuntimeException e) {
            if (gpu != null) {
                gpu.awaitQuietly();
            }
            throw e;
        }
        long t1 = System.nanoTime();
        List<AutoCloseable> resources = new ArrayList<>();
        try {
            Manifest manifest;
            List<Fd> fds;
            try (ProtocolChannel.Incoming in = requestImport(c, expectation, options)) {
                manifest = Manifest.decode(in.reader());
                if (in.fdCount() != manifest.regions().size()) {
                    throw new EngramClientException(ErrorCode.BAD_REQUEST, "manifest lists " + manifest.regions().size()
                            + " regions but " + in.fdCount() + " fds arrived", List.of());
                }
                fds = in.takeFds();
            }
            long t2 = System.nanoTime();
            Map<String, Double> gpuTimings = gpu == null ? Map.of() : gpu.await();
            long t2b = System.nanoTime();
            RegionAttach attached = RegionAttach.attach(manifest, fds, options, resources);
            long t3 = System.nanoTime();
            Guard guard = ImportedTables.guardFor("imported tables of " + socket, resources);
            Map<String, Double> timings = new LinkedHashMap<>();
            timings.put("native_init_ms", (tInit - t0) / 1e6);
            timings.put("handshake_ms", (t1 - tInit) / 1e6);
            timings.put("manifest_ms", (t2 - t1) / 1e6);
            timings.putAll(gpuTimings);
            if (gpu != null) {
                timings.put("gpu_prepare_wait_ms", (t2b - t2) / 1e6);
            }
            timings.putAll(attached.timings);
            timings.put("attach_ms", (t3 - t2b) / 1e6);
            timings.put("total_ms", (t3 - t0) / 1e6);
            int daemonPid = c.channel.connection().peerCredentials().pid();
            DaemonWatch watch = new DaemonWatch(c.channel.connection().rawFd(), daemonPid);
            return new ImportedTables(ImportedTables.Source.DAEMON, ImportedTables.views(manifest, attached.host, attached.gpu, guard),
                    timings, attached.perRegion, HexFormat.of().formatHex(manifest.fingerprintSha256()), c.channel, watch,
                    guard, daemonPid);
        } catch (RuntimeException e) {
            closeAll(resources, e);
            c.channel.close();
            throw e;
        }
    }

    /**
     * {@link #connect}, or, only when no daemon socket exists, a load of {@code checkpoint} into this
     * process's own memory. {@link ImportedTables#source()} says which happened. Any other failure (a
     * refusal, a mismatch, a timeout) throws: it is never silently turned into a slow disk load.
     */
    public static ImportedTables connectOrLoad(Path socket, Expectation expectation, ClientOptions options,
            List<Path> checkpoint, List<String> tables, int threads) {
        try {
            return connect(socket, expectation, options);
        } catch (DaemonAbsentException absent) {
            return DiskLoad.load(checkpoint, tables, threads);
        }
    }

    private static void closeAll(List<AutoCloseable> resources, RuntimeException e) {
        for (int i = resources.size() - 1; i >= 0; i--) {
            try {
                resources.get(i).close();
            } catch (Exception suppressed) {
                e.addSuppressed(suppressed);
            }
        }
    }

    /** The daemon's STATUS document (JSON). */
    public static String status(Path socket, ClientOptions options) {
        Connected c = handshake(socket, options);
        try (c.channel) {
            c.channel.send(Frames.empty(MessageType.STATUS, c.version));
            try (ProtocolChannel.Incoming in = receive(c, options, socket)) {
                expect(in, MessageType.STATUS_REPLY, socket);
                return Frames.decodeStatusReply(in.reader());
            }
        }
    }

    /** Asks the daemon to stop; returns once it has acknowledged. Clients keep their mappings. */
    public static void stop(Path socket, ClientOptions options) {
        Connected c = handshake(socket, options);
        try (c.channel) {
            c.channel.send(Frames.empty(MessageType.STOP, c.version));
            try (ProtocolChannel.Incoming in = receive(c, options, socket)) {
                expect(in, MessageType.STOP_ACK, socket);
            }
        }
    }

    record Connected(ProtocolChannel channel, Welcome welcome, int version) {
    }

    static Connected handshake(Path socket, ClientOptions options) {
        Warmup.start();
        UnixConnection conn;
        try {
            conn = UnixConnection.connect(socket);
        } catch (NativeException e) {
            if (e.errno() == Errno.ENOENT) {
                throw new DaemonAbsentException(socket);
            }
            if (e.errno() == Errno.ECONNREFUSED) {
                throw new EngramClientException("connection to " + socket + " refused: the socket exists but no daemon"
                        + " listens (it may have died; a new daemon cleans it up)", e);
            }
            throw new EngramClientException("cannot connect to " + socket + ": " + e.getMessage(), e);
        }
        ProtocolChannel channel = new ProtocolChannel(conn);
        try {
            channel.send(new Hello(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION, Posix.getpid(),
                    options.clientName()).encode());
            Connected pre = new Connected(channel, null, ProtocolDescriptor.MIN_VERSION);
            try (ProtocolChannel.Incoming in = receive(pre, options, socket)) {
                expect(in, MessageType.WELCOME, socket);
                Welcome w = Welcome.decode(in.reader());
                return new Connected(channel, w, w.version());
            }
        } catch (RuntimeException e) {
            channel.close();
            throw e;
        }
    }

    private static ProtocolChannel.Incoming requestImport(Connected c, Expectation expectation, ClientOptions options) {
        long deadline = System.nanoTime() + options.notReadyWaitMillis() * 1_000_000L;
        while (true) {
            c.channel.send(new ImportRequest(0, options.device(), expectation).encode(c.version));
            ProtocolChannel.Incoming in = receive(c, options, null);
            if (in.type() == MessageType.ERROR) {
                ErrorReply e = ErrorReply.decode(in.reader());
                in.close();
                if (e.code() == ErrorCode.NOT_READY && System.nanoTime() < deadline) {
                    sleep(100);
                    continue;
                }
                throw refusal(e);
            }
            if (in.type() != MessageType.MANIFEST) {
                in.close();
                throw new EngramClientException(ErrorCode.BAD_REQUEST, "expected MANIFEST, got " + in.type(), List.of());
            }
            return in;
        }
    }

    private static ProtocolChannel.Incoming receive(Connected c, ClientOptions options, Path socket) {
        try {
            return c.channel.receive(ProtocolDescriptor.MAX_FDS, options.requestTimeoutMillis());
        } catch (ReceiveTimeoutException e) {
            throw new EngramClientException("the daemon did not answer within " + options.requestTimeoutMillis()
                    + " ms", e);
        } catch (PeerClosedException e) {
            throw new EngramClientException("the daemon closed the connection: " + e.getMessage(), e);
        }
    }

    private static void expect(ProtocolChannel.Incoming in, MessageType type, Path socket) {
        if (in.type() == MessageType.ERROR) {
            throw refusal(ErrorReply.decode(in.reader()));
        }
        if (in.type() != type) {
            throw new EngramClientException(ErrorCode.BAD_REQUEST, "expected " + type + " from " + socket + ", got "
                    + in.type(), List.of());
        }
    }

    private static EngramClientException refusal(ErrorReply e) {
        List<String> details = new ArrayList<>(e.details());
        boolean shortForm = e.details().size() == 1 && e.details().get(0).startsWith("expected fingerprint ");
        if (e.code() == ErrorCode.FINGERPRINT_MISMATCH && shortForm && e.daemonFingerprint().length > 0) {
            details.addAll(daemonRecord(e.daemonFingerprint()));
        }
        ErrorReply withRecord = new ErrorReply(e.code(), e.wireCode(), e.message(), details, e.daemonFingerprint());
        return new EngramClientException(e.code(), e.codeName() + ": " + withRecord.describe(), details);
    }

    /** The daemon's fingerprint, one line per file and table, for a mismatch report. */
    private static List<String> daemonRecord(byte[] canonical) {
        List<String> out = new ArrayList<>();
        try {
            Fingerprint fp = Fingerprint.decode(canonical);
            out.add("the daemon's record: layout " + fp.layoutVersion() + ", backend " + fp.backend());
            fp.files().forEach(f -> out.add("  file " + f.name() + " (" + f.size() + " bytes, header sha256 "
                    + f.headerSha256() + ")"));
            fp.tables().forEach(t -> out.add("  table " + t));
        } catch (RuntimeException malformed) {
            out.add("the daemon's record could not be decoded: " + malformed.getMessage());
        }
        return out;
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new EngramClientException("interrupted while waiting for the daemon", e);
        }
    }
}
