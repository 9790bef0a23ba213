package io.engramhost.cli;

import io.engramhost.client.ClientOptions;
import io.engramhost.client.EngramClient;
import io.engramhost.client.Expectations;
import io.engramhost.client.ImportedTables;
import io.engramhost.client.TableView;
import java.nio.file.Path;
import java.util.HexFormat;

/**
 * The engine of {@link PlainClasspathClientTest}: run alone on the client's runtime class path, it imports from the
 * daemon at {@code args[0]} the tables of the checkpoint {@code args[1]} (expecting its fingerprint), and checks
 * each {@code NAME=SHA256} that follows against the bytes it maps. It uses the client's API only (no class of the
 * CLI or the daemon, and no nested class: the test copies this one class file). Prints one line per check; exits 0
 * when all hold, 1 with the failure otherwise.
 */
public final class PlainClasspathClient {
    private PlainClasspathClient() {
    }

    public static void main(String[] args) throws Exception {
        Path socket = Path.of(args[0]);
        try (ImportedTables tables = EngramClient.connect(socket, Expectations.ofCheckpoint(Path.of(args[1])),
                ClientOptions.defaults())) {
            System.out.println("imported " + tables.tables().size() + " tables");
            for (int i = 2; i < args.length; i++) {
                String name = args[i].substring(0, args[i].indexOf('='));
                String expected = args[i].substring(args[i].indexOf('=') + 1);
                TableView t = tables.table(name);
                String got = HexFormat.of().formatHex(t.sha256());
                if (!got.equals(expected) || t.computeDigest(1) != t.digest()) {
                    fail(name + ": sha256 " + got + ", expected " + expected + "; engram digest " + t.computeDigest(1)
                            + ", the daemon's " + t.digest());
                }
                System.out.println(name + ": bytes match");
            }
            TableView first = tables.table(args[2].substring(0, args[2].indexOf('=')));
            try {
                first.openBytes().close();
                fail("openBytes worked without Chronicle Bytes on the class path");
            } catch (IllegalStateException e) {
                System.out.println("openBytes: " + e.getMessage());
            }
            first.getLong(0); // and the table reads on
        }
        System.out.println("closed");
    }

    private static void fail(String why) {
        System.out.println("FAILED: " + why);
        System.exit(1);
    }
}
