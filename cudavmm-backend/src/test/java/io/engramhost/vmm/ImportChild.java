package io.engramhost.vmm;

import io.engramhost.cuda.CudaResources;
import io.engramhost.cuda.GpuChecksum;
import io.engramhost.cuda.GpuKernels;
import io.engramhost.os.Fd;
import io.engramhost.os.FdMessages;
import io.engramhost.os.UnixConnection;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The engine side of {@link VmmImportProcessTest}, in its own JVM: receives table fds over a Unix
 * socket, attaches them, checksums them on the GPU (and on the CPU through the CPU view), attaches
 * again after closing, and answers {@code key=value} lines.
 */
public final class ImportChild {
    private ImportChild() {
    }

    public static void main(String[] args) {
        Map<String, String> out = new LinkedHashMap<>();
        try (UnixConnection c = UnixConnection.connect(Path.of(args[0]))) {
            int fdsBefore = Fd.openCount(); // the connection's own, open until the report is sent
            try {
                run(c, out);
                out.put("fdsOpen", Integer.toString(Fd.openCount() - fdsBefore));
            } catch (Throwable t) {
                t.printStackTrace();
                out.put("error", String.valueOf(t).replace('\n', ' '));
            }
            StringBuilder sb = new StringBuilder();
            out.forEach((k, v) -> sb.append(k).append('=').append(v).append('\n'));
            c.send(ByteBuffer.wrap(sb.toString().getBytes(StandardCharsets.UTF_8)), List.of());
        }
    }

    private static void run(UnixConnection c, Map<String, String> out) {
        FdMessages.Received r = c.receive(1 << 16, 16, 30_000);
        Map<String, List<Long>> sizes = parse(StandardCharsets.UTF_8.decode(r.payload()).toString());
        List<Long> hostSizes = sizes.get("host");
        List<Long> deviceSizes = sizes.get("device");
        List<Fd> hostFds = r.fds().subList(0, hostSizes.size());
        List<Fd> deviceFds = r.fds().subList(hostSizes.size(), r.fds().size());
        try (GpuKernels k = GpuKernels.load(0)) {
            try (VmmImport a = VmmImport.attach(hostFds, hostSizes, 0, Access.READ_ONLY.withCpuView())) {
                for (int i = 0; i < a.count(); i++) {
                    out.put("host" + i + ".gpu", Long.toString(k.checksum(a.base(i), a.size(i))));
                    out.put("host" + i + ".cpu", Long.toString(GpuChecksum.cpu(a.base(i), a.size(i))));
                }
                out.put("oneRange", Boolean.toString(a.base(0) == a.rangeBase() && a.base(1) == a.base(0) + a.size(0)));
                out.put("timings.cpuView", a.timings().toJson());
            }
            try (VmmImport a = VmmImport.attach(hostFds, hostSizes, 0, Access.READ_ONLY)) {
                for (int i = 0; i < a.count(); i++) {
                    out.put("host" + i + ".gpuAgain", Long.toString(k.checksum(a.base(i), a.size(i))));
                }
                out.put("timings.gpuOnly", a.timings().toJson());
            }
            try (VmmImport d = VmmImport.attach(deviceFds, deviceSizes, 0, Access.READ_ONLY)) {
                out.put("device0.gpu", Long.toString(k.checksum(d.base(0), d.size(0))));
                out.put("device0.location", d.location(0).toString());
            }
        } finally {
            r.fds().forEach(Fd::close);
        }
        out.put("cudaLive", Integer.toString(CudaResources.live()));
    }

    /** {@code host=1,2\ndevice=3} into lists of sizes. */
    static Map<String, List<Long>> parse(String payload) {
        Map<String, List<Long>> m = new LinkedHashMap<>();
        for (String line : payload.split("\n")) {
            int eq = line.indexOf('=');
            List<Long> values = new ArrayList<>();
            for (String v : line.substring(eq + 1).split(",")) {
                values.add(Long.parseLong(v));
            }
            m.put(line.substring(0, eq), values);
        }
        return m;
    }
}
