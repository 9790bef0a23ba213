package io.engramhost.client;

import io.engramhost.os.Errno;
import io.engramhost.os.FdRef;
import io.engramhost.os.NativeException;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import java.util.ArrayList;
import java.util.List;

/**
 * docs/protocol.md, "How to map a region": a memfd region (kinds 0 and 1) is mapped only when its seals
 * make its bytes immutable — F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW and F_SEAL_WRITE — and it holds at least the
 * manifest's size. Without them whoever sent the fd could change the bytes under the client; an fd that is no memfd
 * (F_GET_SEALS: EINVAL) has no seals. F_SEAL_FUTURE_WRITE is not enough: it leaves writable a mapping made before
 * it, through which the sender could still write; it is accepted only when the caller asks
 * ({@link ClientOptions#withFutureWriteSealAccepted}, for a daemon of a build before WRITE).
 */
final class SealCheck {
    /** Every memfd region must carry these, and WRITE ({@link #WRITE_SEALS}: FUTURE_WRITE too, when accepted). */
    static final int REQUIRED = Posix.F_SEAL_SEAL | Posix.F_SEAL_SHRINK | Posix.F_SEAL_GROW;
    static final int WRITE_SEALS = Posix.F_SEAL_WRITE | Posix.F_SEAL_FUTURE_WRITE;

    private SealCheck() {
    }

    /** Refuses region {@code index} of {@code manifest}, received as {@code fd}, unless it is sealed and big enough. */
    static void check(Manifest manifest, int index, FdRef fd, boolean acceptFutureWrite) {
        Manifest.Region r = manifest.regions().get(index);
        int seals;
        try {
            seals = Posix.getSeals(fd);
        } catch (NativeException e) {
            throw new EngramClientException(what(manifest, index) + ": fcntl(F_GET_SEALS) failed: "
                    + Errno.describe(e.errno()) + (e.errno() == Errno.EINVAL ? ": the fd is no memfd" : "")
                    + ", so its bytes could change under this client; refused", e);
        }
        String missing = missing(seals, acceptFutureWrite);
        if (!missing.isEmpty()) {
            throw new EngramClientException(what(manifest, index) + ": its seals are " + names(seals) + " (0x"
                    + Integer.toHexString(seals) + "); missing " + missing
                    + ", so its bytes could change under this client; refused");
        }
        long size = Posix.size(fd);
        if (size < r.size()) {
            throw new EngramClientException(what(manifest, index) + ": the memfd holds " + size
                    + " bytes, less than the manifest's " + r.size() + "; refused");
        }
    }

    /** The seals {@code seals} lacks, e.g. "SEAL, WRITE"; empty when none. */
    static String missing(int seals, boolean acceptFutureWrite) {
        List<String> out = new ArrayList<>();
        if ((seals & Posix.F_SEAL_SEAL) == 0) {
            out.add("SEAL");
        }
        if ((seals & Posix.F_SEAL_SHRINK) == 0) {
            out.add("SHRINK");
        }
        if ((seals & Posix.F_SEAL_GROW) == 0) {
            out.add("GROW");
        }
        if (acceptFutureWrite ? (seals & WRITE_SEALS) == 0 : (seals & Posix.F_SEAL_WRITE) == 0) {
            out.add(acceptFutureWrite ? "WRITE or FUTURE_WRITE" : (seals & Posix.F_SEAL_FUTURE_WRITE) != 0
                    ? "WRITE (FUTURE_WRITE leaves writable a mapping made before it)" : "WRITE");
        }
        return String.join(", ", out);
    }

    /** The seals by name, e.g. "SHRINK|GROW", or "none". */
    static String names(int seals) {
        List<String> out = new ArrayList<>();
        String[] name = {"SEAL", "SHRINK", "GROW", "WRITE", "FUTURE_WRITE"};
        for (int bit = 0; bit < name.length; bit++) {
            if ((seals & (1 << bit)) != 0) {
                out.add(name[bit]);
            }
        }
        int unknown = seals & ~((1 << name.length) - 1);
        if (unknown != 0) {
            out.add("0x" + Integer.toHexString(unknown));
        }
        return out.isEmpty() ? "none" : String.join("|", out);
    }

    /** "region 0 (memfd, 4096 bytes; tables t0, t1)". */
    static String what(Manifest manifest, int index) {
        Manifest.Region r = manifest.regions().get(index);
        List<String> tables = new ArrayList<>();
        int count = 0;
        for (Manifest.Table t : manifest.tables()) {
            if (t.region() == index) {
                if (count++ < 3) {
                    tables.add(t.name());
                }
            }
        }
        String names = tables.isEmpty() ? "no tables" : (count == 1 ? "table " : "tables ") + String.join(", ", tables)
                + (count > 3 ? " and " + (count - 3) + " more" : "");
        return "region " + index + " (" + r.kind().backend() + ", " + r.size() + " bytes; " + names + ")";
    }
}
