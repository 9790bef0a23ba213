package io.engramhost.vmm;

import io.engramhost.cuda.Cuda;
import io.engramhost.cuda.DeviceBuffer;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.cuda.HostRegistration;
import io.engramhost.os.Fd;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * The Java side of {@code native/c/attach_baseline.c}: the same attach paths through engram-host's
 * classes, timed, plus GPU reads through the attached view. Prints one JSON object per line.
 * Usage: {@code AttachBench [--gib N] [--memfd-gib N] [--row-bytes N] [--rows-gathered N]}.
 */
public final class AttachBench {
    private static final double GIB = 1L << 30;

    private AttachBench() {
    }

    public static void main(String[] args) {
        double gib = 16;
        double memfdGib = 16;
        int rowBytes = 264;
        int gathered = 16 << 20;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--gib" -> gib = Double.parseDouble(args[++i]);
                case "--memfd-gib" -> memfdGib = Double.parseDouble(args[++i]);
                case "--row-bytes" -> rowBytes = Integer.parseInt(args[++i]);
                case "--rows-gathered" -> gathered = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        long t0 = System.nanoTime();
        Cuda.useDevice(0);
        print("{\"path\":\"java-context\",\"init_and_primary_context_ms\":%.3f,\"device\":\"%s\"}",
                ms(System.nanoTime() - t0), Cuda.device(0).label());
        if (gib > 0) {
            vmm((long) (gib * GIB), rowBytes, gathered);
        }
        if (memfdGib > 0) {
            memfd((long) (memfdGib * GIB));
        }
    }

    private static void vmm(long bytes, int rowBytes, int gathered) {
        int node = Math.max(0, Cuda.device(0).hostNumaId());
        try (HostNumaAllocation a = HostNumaAllocation.create(bytes, node, "bench")) {
            for (Access access : List.of(Access.READ_ONLY, Access.READ_ONLY.withCpuView())) {
                long te = System.nanoTime();
                Fd fd = a.exportFd();
                long exportNanos = System.nanoTime() - te;
                try (fd; VmmImport v = VmmImport.attach(List.of(fd), List.of(a.size()), 0, access)) {
                    AttachTimings t = v.timings();
                    print("{\"path\":\"java-cuda-vmm%s\",\"gib\":%.2f,\"create_s\":%.3f,\"export_ms\":%.3f,\"attach\":%s}",
                            access.cpuView() ? "+cpu" : "", a.size() / GIB, a.createNanos() / 1e9, ms(exportNanos), t.toJson());
                }
            }
            try (Fd fd = a.exportFd(); VmmImport v = VmmImport.attach(List.of(fd), List.of(a.size()), 0, Access.READ_ONLY);
                    GpuKernels k = GpuKernels.load(0)) {
                reads(k, v.base(0), v.size(0), rowBytes, gathered);
            }
        }
    }

    private static void reads(GpuKernels k, long base, long size, int rowBytes, int gathered) {
        k.readSequential(base, Math.min(size, 1L << 30));
        long t = System.nanoTime();
        k.readSequential(base, size);
        long seq = System.nanoTime() - t;
        long rows = size / rowBytes;
        try (Mapping ids = Posix.mmapAnonymous(8L * gathered, "row ids");
                DeviceBuffer dIds = DeviceBuffer.allocate(8L * gathered, 0, "row ids");
                DeviceBuffer out = DeviceBuffer.allocate((long) gathered * rowBytes, 0, "gathered rows")) {
            SplittableRandom random = new SplittableRandom(1);
            for (int i = 0; i < gathered; i++) {
                TestMemory.MEMORY.putLong(ids.address() + 8L * i, random.nextLong(rows));
            }
            dIds.copyFromHost(ids.address(), 0, 8L * gathered);
            k.gather(base, rows, rowBytes, dIds.pointer(), gathered, out.pointer());
            t = System.nanoTime();
            k.gather(base, rows, rowBytes, dIds.pointer(), gathered, out.pointer());
            long gather = System.nanoTime() - t;
            print("{\"path\":\"java-gpu-reads\",\"table_gib\":%.2f,\"sequential_gb_s\":%.2f,\"row_bytes\":%d,"
                    + "\"rows_gathered\":%d,\"gather_mrows_s\":%.2f,\"gather_gb_s\":%.2f}",
                    size / GIB, size / (double) seq, rowBytes, gathered, gathered * 1e3 / gather,
                    (double) gathered * rowBytes / gather);
        }
    }

    private static void memfd(long bytes) {
        try (Fd fd = Posix.memfdCreate("bench", Posix.MFD_ALLOW_SEALING)) {
            long t0 = System.nanoTime();
            Posix.ftruncate(fd, bytes);
            try (Mapping w = Posix.mmap(bytes, Posix.PROT_READ | Posix.PROT_WRITE, Posix.MAP_SHARED | Posix.MAP_POPULATE, fd, 0)) {
                for (long off = 0; off < bytes; off += 4096) {
                    TestMemory.MEMORY.putByte(w.address() + off, (byte) off);
                }
            }
            long t1 = System.nanoTime();
            try (Mapping r = Posix.mmap(bytes, Posix.PROT_READ, Posix.MAP_SHARED, fd, 0)) {
                long t2 = System.nanoTime();
                try (HostRegistration reg = HostRegistration.register(r.address(), bytes, 0, true)) {
                    long t3 = System.nanoTime();
                    print("{\"path\":\"java-memfd-4k\",\"gib\":%.2f,\"fill_s\":%.3f,\"mmap_ms\":%.3f,\"register_ms\":%.3f,"
                            + "\"chunks\":%d,\"ms_per_gib\":%.3f}", bytes / GIB, (t1 - t0) / 1e9, ms(t2 - t1), ms(t3 - t2),
                            reg.chunkCount(), ms(t3 - t1) / (bytes / GIB));
                }
            }
        }
    }

    private static double ms(long nanos) {
        return nanos / 1e6;
    }

    private static void print(String format, Object... args) {
        System.out.println(String.format(Locale.ROOT, format, args));
        System.out.flush();
    }
}
