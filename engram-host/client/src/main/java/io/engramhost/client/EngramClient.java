package io.engramhost.client;

import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.os.Errno;
import io.engramhost.os.Fd;
import io.engramhost.os.NativeException;
import io.engramhost.os.PeerClosedException;
import io.engramhost.os.PeerCredentials;
import io.engramhost.os.Posix;
import io.engramhost.os.ReceiveTimeoutException;
import io.engramhost.os.UnixConnection;
import io.engramhost.os.UnixSockets;
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
import io.engramhost.protocol.ProtocolException;
import io.engramhost.protocol.Welcome;
import io.engramhost.util.Closer;
import io.engramhost.util.Lap;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;
import java.util.stream.Collectors;

/** The client library's entry points: import tables, ask for status, stop a daemon. */
public final class EngramClient {
    private EngramClient() {
    }

    /**
     * Connects to the daemon at {@code socket}, checks that it is the daemon (its uid, then every
     * memfd's seals), checks {@code expectation}, receives the manifest and fds and maps every host
     * table read-only. The connection stays open as the lease.
     *
     * @throws DaemonAbsentException when no daemon listens at the path: no socket file (ENOENT), or one
     *     nobody listens on (ECONNREFUSED); a caller may load from disk
     * @throws EngramClientException on a refusal, a mismatch, "not ready" past the wait, a timeout, a
     *     daemon this client does not trust (uid, seals) or one that breaks the protocol
     */
    public static ImportedTables connect(Path socket, Expectation expectation, ClientOptions options) {
        return connect(socket, expectation, options, Cancel.NONE, true);
    }

    /**
     * {@link #connect}, on a thread of its own: returns at once a {@link PendingTables}, whose {@link
     * PendingTables#await()} gives the tables once the attach has completed, or throws what {@code connect} would
     * have thrown. Everything runs on that thread ({@code engram-attach}, a daemon thread): the native bindings'
     * load, the socket's connect, the handshake, the retries while the daemon loads, the GPU's context and the
     * attach; this call only starts it. {@link PendingTables#close()} stops it at its next step and frees whatever
     * it attached.
     */
    public static PendingTables connectInBackground(Path socket, Expectation expectation, ClientOptions options) {
        Objects.requireNonNull(socket, "socket");
        Objects.requireNonNull(expectation, "expectation");
        Objects.requireNonNull(options, "options");
        return PendingTables.start(socket.toString(), cancel -> connect(socket, expectation, options, cancel, true));
    }

    /** {@code waitForStart} false: no daemon listening is final at once, whatever the wait (connectOrLoad's case). */
    private static ImportedTables connect(Path socket, Expectation expectation, ClientOptions options, Cancel cancel,
            boolean waitForStart) {
        try {
            return attach(socket, expectation, options, cancel, waitForStart);
        } catch (RuntimeException e) {
            throw EngramClientException.of(e); // no driver (CudaUnavailableException), a failed mmap, ...: one type
        }
    }

    private static ImportedTables attach(Path socket, Expectation expectation, ClientOptions options, Cancel cancel,
            boolean waitForStart) {
        Lap lap = Lap.start();
        Warmup.start();
        GpuPreparation gpu = options.gpuView() ? GpuPreparation.take(options.device()) : null;
        Posix.raiseNoFileLimit(); // the first native call of a process also loads the bindings
        long nativeInitNanos = lap.lap();
        Connected c;
        long deadline = System.nanoTime() + options.notReadyWaitMillis() * 1_000_000L;
        try {
            cancel.check();
            c = waitForStart ? awaitStart(socket, options, cancel, deadline) : handshake(socket, options, cancel);
        } catch (RuntimeException e) {
            if (gpu != null) {
                gpu.awaitQuietly();
            }
            throw e;
        }
        long handshakeNanos = lap.lap();
        List<AutoCloseable> resources = new ArrayList<>();
        List<Fd> fds = List.of();
        try {
            ProtocolChannel.Incoming answered;
            while ((answered = requestImport(c, expectation, options, cancel, deadline)) == null) {
                // STOPPING within the wait: a restart under way; the next daemon answers on a new connection
                cancel.close(c.channel);
                c = reconnect(socket, options, cancel, deadline);
            }
            Manifest manifest;
            boolean headersOnly;
            try (ProtocolChannel.Incoming in = answered) {
                manifest = Manifest.decode(in.reader());
                if (in.fdCount() != manifest.regions().size()) {
                    throw new ProtocolException("MANIFEST lists " + manifest.regions().size() + " regions but "
                            + in.fdCount() + " fds arrived");
                }
                if (!MessageDigest.isEqual(sha256(manifest.fingerprint()), manifest.fingerprintSha256())) {
                    throw new ProtocolException("MANIFEST: fingerprint_sha256 is not the SHA-256 of the fingerprint it"
                            + " carries");
                }
                ManifestChecks.check(manifest, Posix.pageSize());
                headersOnly = checkServedFingerprint(socket, manifest, expectation);
                fds = in.takeFds();
            }
            long manifestNanos = lap.lap();
            long gpuPrepareNanos = ImportTimings.NOT_MEASURED;
            long gpuPrepareWaitNanos = ImportTimings.NOT_MEASURED;
            if (gpu != null) {
                GpuPreparation taken = gpu;
                gpu = null;
                gpuPrepareNanos = taken.await();
                gpuPrepareWaitNanos = lap.lap();
            }
            cancel.check();
            List<Fd> attaching = fds;
            fds = List.of(); // RegionAttach closes them, whatever happens
            RegionAttach attached = RegionAttach.attach(manifest, attaching, options, resources, cancel);
            long attachNanos = lap.lap();
            cancel.check();
            if (headersOnly) { // said once the tables are the engine's, not for an import refused after all
                options.notices().accept(HEADERS_ONLY);
            }
            ImportTimings timings = new ImportTimings(nativeInitNanos, handshakeNanos, manifestNanos, gpuPrepareNanos,
                    gpuPrepareWaitNanos, attached.mapNanos, attached.registerNanos, attached.vmm, attached.device,
                    attachNanos, ImportTimings.NOT_MEASURED, lap.total());
            Guard guard = ImportedTables.guardFor("imported tables of " + socket, resources);
            int daemonPid = c.peer.pid();
            cancel.release(c.channel.connection()); // the lease: a cancel from now on closes the tables instead
            DaemonWatch watch = new DaemonWatch(c.channel.connection().rawFd());
            return new ImportedTables(ImportedTables.Source.DAEMON, ImportedTables.views(manifest, attached.host, attached.gpu, guard),
                    timings, List.of(attached.perRegion), HexFormat.of().formatHex(manifest.fingerprintSha256()), c.channel, c.version, watch,
                    guard, daemonPid);
        } catch (ProtocolException e) {
            EngramClientException wrapped = protocolError(socket, e);
            abandon(wrapped, c, fds, resources, gpu, cancel);
            throw wrapped;
        } catch (RuntimeException e) {
            abandon(e, c, fds, resources, gpu, cancel);
            throw e;
        }
    }

    /** A failed or cancelled import: the fds received and not yet attached, every resource, the connection. */
    private static void abandon(Throwable cause, Connected c, List<Fd> fds, List<AutoCloseable> resources,
            GpuPreparation gpu, Cancel cancel) {
        fds.forEach(Fd::close);
        Closer.closeAllAfter(cause, resources);
        if (gpu != null) {
            gpu.awaitQuietly();
        }
        cancel.close(c.channel);
    }

    /**
     * Starts, in the background, what a {@link #connect} with {@code options} needs before its attach: the SHA-256
     * of the manifest's check and, with a GPU view, the device's primary context and a rehearsal of the attach path.
     * {@link #connect} starts them itself; a process that knows earlier that it will import (a command line once it
     * has parsed its arguments, an engine at its start) calls this first, so that the CUDA context is created while
     * the process still does its own work (its configuration, its native bindings, the socket's path) rather than
     * after the handshake. Returns at once. The next {@code connect} with a GPU view on that device waits for this
     * preparation instead of starting one, and reports its failure (no driver, no such GPU) as its own.
     */
    public static void prepare(ClientOptions options) {
        Warmup.start();
        if (options.gpuView()) {
            GpuPreparation.startEarly(options.device());
        }
    }

    /**
     * Starts loading the CUDA driver in the background (libcuda's binding, cuInit, the device count): the part of
     * {@link #prepare}'s GPU work that does not depend on the options, for a process that knows it will import with
     * a GPU view before it knows on which device (a command line before it parses its arguments). Returns at once;
     * what the load finds (no driver, no device) is reported by the import as without it.
     */
    public static void prepareCudaDriver() {
        GpuPreparation.loadDriverEarly();
    }

    /**
     * {@link #connect}, or, only when no daemon listens at {@code socket} (no socket file, or a socket
     * file whose connect is refused, as a killed daemon leaves), a load of {@code checkpoint} into this
     * process's own memory, said in one line to {@link ClientOptions#notices()}. {@link
     * ImportedTables#source()} says which happened. Whatever a live daemon answers (a refusal, a
     * mismatch, BUSY, a timeout) and a daemon this client does not trust throw: none of them is ever
     * silently turned into a slow disk load. The daemon's lock file is never touched.
     */
    public static ImportedTables connectOrLoad(Path socket, Expectation expectation, ClientOptions options,
            List<Path> checkpoint, List<String> tables, int threads) {
        try {
            return connect(socket, expectation, options, Cancel.NONE, false); // no daemon: the disk, not a wait
        } catch (DaemonAbsentException absent) {
            options.notices().accept("engram-host: no daemon listens on " + socket + " (" + absent.reason()
                    + "): loading " + checkpoint.stream().map(Path::toString).collect(Collectors.joining(", "))
                    + " from disk");
            try {
                return DiskLoad.load(checkpoint, tables, threads);
            } catch (RuntimeException e) {
                throw EngramClientException.of(e);
            }
        }
    }

    /**
     * For a process about to exit: waits up to {@code millis} for the driver's load of {@link #prepareCudaDriver} and
     * a GPU preparation of {@link #prepare} that no connect took, so that the exit does not cut a driver call short.
     * Returns at once when neither was started.
     */
    public static void awaitGpuPreparation(long millis) {
        GpuPreparation.awaitUntaken(millis);
    }

    /** The daemon's STATUS document (JSON). */
    public static String status(Path socket, ClientOptions options) {
        try {
            Connected c = handshake(socket, options);
            try (c.channel) {
                c.channel.send(Frames.empty(MessageType.STATUS, c.version));
                try (ProtocolChannel.Incoming in = receive(c, options)) {
                    expect(in, MessageType.STATUS_REPLY);
                    return Frames.decodeStatusReply(in.reader());
                }
            } catch (ProtocolException e) {
                throw protocolError(socket, e);
            }
        } catch (RuntimeException e) {
            throw EngramClientException.of(e);
        }
    }

    /** Asks the daemon to stop; returns once it has acknowledged. Clients keep their mappings. */
    public static void stop(Path socket, ClientOptions options) {
        try {
            Connected c = handshake(socket, options);
            try (c.channel) {
                c.channel.send(Frames.empty(MessageType.STOP, c.version));
                try (ProtocolChannel.Incoming in = receive(c, options)) {
                    expect(in, MessageType.STOP_ACK);
                }
            } catch (ProtocolException e) {
                throw protocolError(socket, e);
            }
        } catch (RuntimeException e) {
            throw EngramClientException.of(e);
        }
    }

    /**
     * A connection after HELLO/WELCOME. {@code version} is the chosen one, or 0 before WELCOME, when
     * only an ERROR encoded as version 1 may arrive.
     */
    /**
     * Unless the caller accepts any, the manifest's fingerprint must meet the expectation, as the
     * daemon itself judges it: the same SHA-256 for a short one; for a structured one, of any size, no
     * difference. A daemon that answers an expectation it does not meet is refused. (An impostor can copy a fingerprint; the uid, seal and content checks are what
     * stop it.)
     */
    /** Returns whether a structured expectation was met by headers alone (no content identity in common). */
    private static boolean checkServedFingerprint(Path socket, Manifest manifest, Expectation expectation) {
        byte[] served = manifest.fingerprintSha256();
        String why;
        boolean headersOnly = false;
        switch (expectation.kind()) {
            case ANY -> why = null;
            case SHA256 -> why = MessageDigest.isEqual(served, expectation.bytes()) ? null
                    : "fingerprint " + HexFormat.of().formatHex(served) + ", not the expected "
                            + HexFormat.of().formatHex(expectation.bytes());
            default -> {
                Fingerprint wanted = Fingerprint.decode(expectation.bytes());
                Fingerprint actual;
                try {
                    actual = Fingerprint.decode(manifest.fingerprint());
                } catch (RuntimeException e) {
                    throw new ProtocolException("the daemon on " + socket + " answered an expectation it does not"
                            + " meet: its structured fingerprint is malformed: " + e.getMessage());
                }
                List<String> d = wanted.differences(actual, 3);
                why = d.isEmpty() ? null : String.join("; ", d);
                headersOnly = d.isEmpty() && !wanted.sharesIdentityWith(actual);
            }
        }
        if (why != null) {
            throw new ProtocolException("the daemon on " + socket + " answered an expectation it does not meet: " + why);
        }
        return headersOnly;
    }

    /**
     * What the client says, once per import, when a structured expectation is met but the two sides share no
     * content identity (docs/checkpoints.md, "Content identity"): the same words as the Python client's.
     */
    public static final String HEADERS_ONLY = "compared headers only: neither side has content identity in common;"
            + " write a digest record (engram-host inspect --write-digests PATH) or serve from a Hugging Face"
            + " snapshot to compare content";

    private static byte[] sha256(byte[] b) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    record Connected(Path socket, ProtocolChannel channel, PeerCredentials peer, Welcome welcome, int version) {
    }

    /**
     * connect, the daemon's uid (SO_PEERCRED, before anything is sent), HELLO (versions 1 to 2), and
     * WELCOME: encoded in a version this client offered, and in version 2 naming the uid SO_PEERCRED
     * gave. The first frame may be an ERROR the daemon sent at accept (NOT_ALLOWED, BUSY).
     */
    static Connected handshake(Path socket, ClientOptions options) {
        return handshake(socket, options, Cancel.NONE);
    }

    private static Connected handshake(Path socket, ClientOptions options, Cancel cancel) {
        Warmup.start();
        UnixConnection conn;
        try {
            conn = UnixConnection.connect(socket);
        } catch (NativeException e) {
            if (UnixSockets.noListener(e.errno())) {
                throw new DaemonAbsentException(socket, e.errno(), e);
            }
            if (e.errno() == Errno.EACCES || e.errno() == Errno.EPERM) {
                // the errno alone, as the C and Python clients say it: the call is the socket just named
                throw new EngramClientException("cannot connect to " + socket + ": " + Errno.describe(e.errno()) + ": "
                        + AccessHint.of(socket, Posix.geteuid()), e);
            }
            throw new EngramClientException("cannot connect to " + socket + ": " + e.getMessage(), e);
        }
        ProtocolChannel channel = new ProtocolChannel(conn);
        cancel.watch(conn);
        try {
            PeerCredentials peer = conn.peerCredentials();
            DaemonTrust.checkPeer(socket, peer, options);
            Connected pre = new Connected(socket, channel, peer, null, 0);
            try {
                channel.send(new Hello(ProtocolDescriptor.MIN_VERSION, ProtocolDescriptor.MAX_VERSION, Posix.getpid(),
                        options.clientName()).encode());
            } catch (PeerClosedException closed) {
                // A daemon that refuses at accept writes its ERROR and closes: the ERROR is still there to read.
            }
            try (ProtocolChannel.Incoming in = receive(pre, options)) {
                expect(in, MessageType.WELCOME);
                int v = in.reader().version();
                if (v < ProtocolDescriptor.MIN_VERSION || v > ProtocolDescriptor.MAX_VERSION) {
                    throw new ProtocolException("WELCOME chose version " + v + ", but this client offered versions "
                            + ProtocolDescriptor.MIN_VERSION + " to " + ProtocolDescriptor.MAX_VERSION);
                }
                Welcome w = Welcome.decode(in.reader());
                DaemonTrust.checkWelcome(socket, peer, w);
                return new Connected(socket, channel, peer, w, w.version());
            }
        } catch (ProtocolException e) {
            cancel.close(channel);
            throw protocolError(socket, e);
        } catch (RuntimeException e) {
            cancel.close(channel);
            throw e;
        }
    }

    /**
     * A new handshake after a STOPPING answer: while {@code deadline} lasts, a socket nobody listens on yet (the
     * stopped daemon removed it; its successor has not bound it) is tried again every {@link #RETRY_MILLIS}.
     */
    private static Connected reconnect(Path socket, ClientOptions options, Cancel cancel, long deadline) {
        while (true) {
            cancel.sleep(RETRY_MILLIS);
            try {
                return handshake(socket, options, cancel);
            } catch (DaemonAbsentException absent) {
                if (System.nanoTime() >= deadline) {
                    throw absent;
                }
            }
        }
    }

    /**
     * The first handshake: while {@code deadline} (System.nanoTime) lasts, a socket nobody listens on yet (a daemon
     * still starting) is tried again every {@link #RETRY_MILLIS}.
     */
    private static Connected awaitStart(Path socket, ClientOptions options, Cancel cancel, long deadline) {
        while (true) {
            try {
                return handshake(socket, options, cancel);
            } catch (DaemonAbsentException absent) {
                if (System.nanoTime() >= deadline) {
                    throw absent;
                }
            }
            cancel.sleep(RETRY_MILLIS);
        }
    }

    /** How often an import is asked again while the wait lasts (NOT_READY, STOPPING, a daemon starting). */
    private static final long RETRY_MILLIS = 100;

    /**
     * IMPORT, asked again on this connection every {@link #RETRY_MILLIS} while the daemon answers NOT_READY and
     * {@code deadline} (System.nanoTime) has not passed; null when it answered STOPPING before the deadline, for the
     * caller to ask again on a new connection (the daemon closes this one).
     */
    private static ProtocolChannel.Incoming requestImport(Connected c, Expectation expectation, ClientOptions options,
            Cancel cancel, long deadline) {
        while (true) {
            cancel.check();
            c.channel.send(new ImportRequest(0, options.device(), expectation).encode(c.version));
            ProtocolChannel.Incoming in = receive(c, options);
            if (in.type() == MessageType.ERROR) {
                ErrorReply e = ErrorReply.decode(in.reader());
                in.close();
                if (e.code() == ErrorCode.NOT_READY && System.nanoTime() < deadline) {
                    cancel.sleep(RETRY_MILLIS);
                    continue;
                }
                if (e.code() == ErrorCode.STOPPING && System.nanoTime() < deadline) {
                    return null;
                }
                if (e.code() == ErrorCode.FINGERPRINT_MISMATCH) {
                    throw FingerprintMismatchException.of(e, c.socket(), expectation);
                }
                throw refusal(e);
            }
            if (in.type() != MessageType.MANIFEST) {
                in.close();
                throw new ProtocolException("expected MANIFEST, got " + in.type());
            }
            return in;
        }
    }

    /**
     * One frame from the daemon, whole (parts joined), checked: before WELCOME only an ERROR encoded as
     * version 1 or a WELCOME (checked by the caller); after it, every frame in the chosen version; fds
     * with MANIFEST only. A frame that fails a check is closed with its fds.
     */
    private static ProtocolChannel.Incoming receive(Connected c, ClientOptions options) {
        int maxPayload = c.version >= 2 ? ProtocolDescriptor.MAX_V2_PAYLOAD
                : c.version == 1 ? ProtocolDescriptor.MAX_PAYLOAD : ProtocolDescriptor.MAX_PRE_VERSION_PAYLOAD;
        ProtocolChannel.Incoming in;
        try {
            in = c.channel.receive(maxPayload, ProtocolDescriptor.MAX_FDS, options.requestTimeoutMillis());
        } catch (ReceiveTimeoutException e) {
            throw new EngramClientException("the daemon on " + c.socket + " did not answer within "
                    + options.requestTimeoutMillis() + " ms", e);
        } catch (PeerClosedException e) {
            throw new EngramClientException("the daemon on " + c.socket + " closed the connection: " + e.getMessage(), e);
        }
        try {
            if (c.version == 0) {
                if (in.type() == MessageType.ERROR && in.reader().version() != ProtocolDescriptor.MIN_VERSION) {
                    throw new ProtocolException("ERROR encoded as version " + in.reader().version()
                            + " before a version was chosen; it must be version 1");
                }
            } else {
                in.reader().requireVersion(c.version);
            }
            if (in.fdCount() > 0 && in.type() != MessageType.MANIFEST) {
                throw new ProtocolException(in.type() + " arrived with " + in.fdCount() + " fds; only MANIFEST carries"
                        + " fds");
            }
            return in;
        } catch (RuntimeException e) {
            in.close();
            throw e;
        }
    }

    private static void expect(ProtocolChannel.Incoming in, MessageType type) {
        if (in.type() == MessageType.ERROR) {
            throw refusal(ErrorReply.decode(in.reader()));
        }
        if (in.type() != type) {
            throw new ProtocolException("expected " + type + ", got " + in.type());
        }
    }

    /** A frame from the daemon that breaks docs/protocol.md: the connection is unusable, nothing is retried. */
    private static EngramClientException protocolError(Path socket, ProtocolException e) {
        EngramClientException wrapped = new EngramClientException("the daemon on " + socket + " broke the protocol: "
                + e.getMessage());
        wrapped.initCause(e);
        return wrapped;
    }

    /** A refusal other than a mismatch (which {@link FingerprintMismatchException} shows): its code, message, details. */
    private static EngramClientException refusal(ErrorReply e) {
        return new EngramClientException(e.code(), e.wireCode(), e.codeName() + ": " + e.describe(), e.details());
    }

}
