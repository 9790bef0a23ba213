package io.engramhost.client;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.CheckpointLoader;
import io.engramhost.checkpoint.ContentDigest;
import io.engramhost.checkpoint.Fingerprint;
import io.engramhost.checkpoint.ServedSelection;
import io.engramhost.checkpoint.TableDigests;
import io.engramhost.checkpoint.TensorInfo;
import io.engramhost.os.Mapping;
import io.engramhost.os.Posix;
import io.engramhost.protocol.Manifest;
import io.engramhost.protocol.RegionKind;
import io.engramhost.util.Closer;
import io.engramhost.util.Lap;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** The fallback when no daemon serves: the client loads the checkpoint into its own anonymous memory. */
final class DiskLoad {
    private DiskLoad() {
    }

    static ImportedTables load(List<Path> checkpoint, List<String> tables, int threads) {
        Lap lap = Lap.start();
        Checkpoint cp = Checkpoint.open(checkpoint);
        ServedSelection served = ServedSelection.of(cp, tables, ""); // what a daemon would serve: the same rules
        List<TensorInfo> selected = served.selection().tensors();
        Fingerprint fp = served.fingerprint();
        List<AutoCloseable> resources = new ArrayList<>();
        try {
            Map<TensorInfo, Long> address = new HashMap<>();
            long[] bases = new long[selected.size()];
            List<Manifest.Table> entries = new ArrayList<>();
            for (int i = 0; i < selected.size(); i++) {
                TensorInfo t = selected.get(i);
                long base = 0;
                if (t.length() > 0) {
                    Mapping m = Posix.mmapAnonymous(t.length(), "table " + t.name());
                    resources.add(m);
                    base = m.address();
                }
                bases[i] = base;
                address.put(t, base);
            }
            new CheckpointLoader(threads).load(selected, address::get);
            for (int i = 0; i < selected.size(); i++) {
                TensorInfo t = selected.get(i);
                long digest = ContentDigest.digestParallel(bases[i], t.length(), threads);
                TableDigests recorded = served.identity().table(t.name());
                if (recorded != null && !recorded.engramDigest().equals(ContentDigest.hex(digest))) {
                    throw new EngramClientException(t.file() + ": tensor '" + t.name() + "': its bytes have engram"
                            + " digest v1 " + ContentDigest.hex(digest) + ", but its digest record says "
                            + recorded.engramDigest() + "; restore the file, or write the record again with"
                            + " engram-host inspect --write-digests");
                }
                entries.add(new Manifest.Table(t.name(), t.dtype().name(), t.shape(), t.length(), t.length() > 0 ? i : -1,
                        0, digest, RegionKind.DISK, -1, -1));
            }
            Manifest manifest = new Manifest(new byte[32], new byte[0], List.of(), entries);
            Guard guard = ImportedTables.guardFor("tables loaded from " + checkpoint, resources);
            return new ImportedTables(ImportedTables.Source.DISK, ImportedTables.views(manifest, bases, null, guard),
                    ImportTimings.disk(lap.total()), List.of(), fp.sha256Hex(), null, 0, null, guard, -1);
        } catch (RuntimeException e) {
            Closer.closeAllAfter(e, resources);
            throw e;
        }
    }
}
