package io.engramhost.bench;

import io.engramhost.os.Fd;
import io.engramhost.protocol.RegionKind;
import java.nio.file.Path;
import jnr.ffi.LibraryLoader;

/**
 * The C baseline of {@link AttachBench}, in this process: the attach code of the C client
 * ({@code native/c}, the functions a protocol import calls) built as {@value #LIBRARY}
 * ({@code make -C native engram-attach-bench-lib}; {@code native/c/engram_attach_bench.c}) and bound here with JNR-FFI.
 * JMH times a call of {@link #attach} exactly as it times the Java attach: the same thread, the same fd, nothing
 * between the clock and the driver but one JNR call. Whatever the C code maps, registers or imports, it releases
 * itself in {@link #release}. One region at a time per process. The library loads libcuda.so.1 only when
 * {@link #context} or an attach needs it, so a memfd CPU view works without a GPU.
 */
final class CAttach {
    static final String LIBRARY = "libengram-attach-bench.so";
    static final int FLAG_CPU_VIEW = 1;
    static final int FLAG_REGISTER = 2;

    /** The library's calls (native/c/engram_attach_bench.c). */
    public interface Lib {
        String engram_bench_error();

        int engram_bench_context(int device);

        long engram_bench_attach(int kind, int fd, long size, int node, int flags);

        int engram_bench_release();
    }

    private final Path path;
    private final Lib lib;

    private CAttach(Path path, Lib lib) {
        this.path = path;
        this.lib = lib;
    }

    /** Loads the library that {@link PeerClients#attachLibrary()} finds. */
    static CAttach load() {
        Path path = PeerClients.attachLibrary().toAbsolutePath();
        try {
            return new CAttach(path, LibraryLoader.create(Lib.class).failImmediately().load(path.toString()));
        } catch (UnsatisfiedLinkError e) {
            throw new IllegalStateException("cannot load the C attach library " + path + ": " + e.getMessage(), e);
        }
    }

    /**
     * libcuda, cuInit, GPU {@code device}'s primary context (the one the Java side uses) and the VMM granularity in
     * the C code, once; the context made current in this thread. Call before timing an attach that needs CUDA.
     */
    void context(int device) {
        if (lib.engram_bench_context(device) != 0) {
            throw failure("engram_bench_context(GPU " + device + ")");
        }
    }

    /**
     * Attaches {@code fd} ({@code size} bytes, a region of {@code kind}) as the C client does: returns the view's
     * address. {@code node} is a cuda-vmm region's NUMA node; {@code flags} {@link #FLAG_CPU_VIEW},
     * {@link #FLAG_REGISTER}. The fd stays the caller's.
     */
    long attach(RegionKind kind, Fd fd, long size, int node, int flags) {
        long address = lib.engram_bench_attach(kind.code(), fd.get(), size, node, flags);
        if (address == 0) {
            throw failure("engram_bench_attach(" + kind + ", " + size + " bytes, flags " + flags + ")");
        }
        return address;
    }

    /** Releases what the last attach made, in the C code (unmap, release, free; unregister, munmap). */
    void release() {
        if (lib.engram_bench_release() != 0) {
            throw failure("engram_bench_release");
        }
    }

    private IllegalStateException failure(String call) {
        return new IllegalStateException("C attach (" + path + "): " + call + ": " + lib.engram_bench_error());
    }
}
