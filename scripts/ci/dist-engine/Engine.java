import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.Expectations;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import java.nio.file.Path;

/**
 * dist-check.sh's Java engine: compiled against the tarball's client/ jars alone and run by its runtime with no JVM
 * flag, it imports from the daemon at args[0] the tables of the model directory args[1] and checks every table's
 * engram digest against the daemon's. Exit 0 when all match.
 */
public final class Engine {
    private Engine() {
    }

    public static void main(String[] args) throws Exception {
        try (ImportedTables tables = EngramClient.connect(Path.of(args[0]), Expectations.ofCheckpoint(Path.of(args[1])),
                ClientOptions.defaults())) {
            for (TableView t : tables.tables().values()) {
                if (t.computeDigest(1) != t.digest()) {
                    System.out.println("engine: FAILED: " + t.name() + ": the mapped bytes' digest differs from the daemon's");
                    System.exit(1);
                }
            }
            System.out.println("engine: " + tables.tables().size() + " tables imported, every digest matches");
        }
    }
}
