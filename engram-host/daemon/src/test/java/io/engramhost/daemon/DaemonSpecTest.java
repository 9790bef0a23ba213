package io.engramhost.daemon;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.client.ClientOptions;
import io.engramhost.daemon.loop.ConnectionLimits;
import io.engramhost.json.JsonReader;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * The daemon's and the Java client's own limits against docs/protocol-spec.json, both ways: every limit of scope
 * "daemon" or "client" is the constant named here (ProtocolSpecTest holds the wire's), and every public default of
 * {@link ConnectionLimits} is one the spec names. Constants that are not public are read by reflection: the test
 * names them, and the code keeps them where they are used.
 */
class DaemonSpecTest {
    private static final Path SPEC = Path.of(System.getProperty("user.dir")).getParent().getParent()
            .resolve("docs/protocol-spec.json");
    /** Each limit of scope daemon or client, and the constant that holds it (class, field). */
    private static final Map<String, String[]> HELD = new LinkedHashMap<>();

    static {
        HELD.put("structured_decoded", new String[] {"io.engramhost.store.FingerprintMatch", "DETAILED_EXPECTATION"});
        HELD.put("mismatch_lines", new String[] {"io.engramhost.protocol.ErrorReply", "MAX_LISTED"});
        HELD.put("small_message", new String[] {"io.engramhost.daemon.loop.RequestMemory", "SMALL_MESSAGE"});
        HELD.put("small_message_pool", new String[] {"io.engramhost.daemon.loop.RequestMemory", "SMALL_POOL"});
        HELD.put("request_memory", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_REQUEST_MEMORY"});
        // serve refuses a --request-memory below one IMPORT of the largest size (ConnectionLimits)
        HELD.put("request_memory_floor", new String[] {"io.engramhost.protocol.ProtocolDescriptor", "MAX_REQUEST"});
        HELD.put("max_connections", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_MAX_CONNECTIONS"});
        HELD.put("max_connections_per_uid", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_MAX_PER_UID"});
        HELD.put("hello_timeout", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_HELLO_TIMEOUT_MILLIS"});
        HELD.put("request_timeout", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_REQUEST_TIMEOUT_MILLIS"});
        HELD.put("idle_timeout", new String[] {"io.engramhost.daemon.loop.ConnectionLimits", "DEFAULT_IDLE_TIMEOUT_MILLIS"});
        HELD.put("handover_ready_wait", new String[] {"io.engramhost.daemon.handover.HandoverSender", "READY_TIMEOUT_MILLIS"});
        HELD.put("handover_drain", new String[] {"io.engramhost.daemon.handover.HandoverSender", "DRAIN_MILLIS"});
        HELD.put("handover_done_wait", new String[] {"io.engramhost.daemon.handover.HandoverSender", "DONE_TIMEOUT_MILLIS"});
        HELD.put("handover_catalog_wait", new String[] {"io.engramhost.daemon.handover.Takeover", "CATALOG_TIMEOUT_MILLIS"});
        HELD.put("handover_commit_wait", new String[] {"io.engramhost.daemon.handover.Takeover", "COMMIT_TIMEOUT_MILLIS"});
        HELD.put("answer_wait", new String[] {"io.engramhost.protocol.ProtocolDescriptor", "DEFAULT_REQUEST_TIMEOUT_MILLIS"});
        HELD.put("retry_interval", new String[] {"io.engramhost.client.EngramClient", "RETRY_MILLIS"});
    }

    /** Public defaults of ConnectionLimits that are no limit of the protocol, and why. */
    private static final Map<String, String> NOT_PROTOCOL = Map.of(
            "DEFAULT_WORKERS", "the size of the daemon's worker pool (docs/operator-reference.md), not a limit a peer meets");

    @Test
    void theDaemonsAndTheClientsLimitsAreTheSpecs() throws Exception {
        Map<String, Long> spec = new TreeMap<>();
        List<String> unheld = new ArrayList<>();
        @SuppressWarnings("unchecked")
        Map<String, Object> doc = (Map<String, Object>) JsonReader.parse(Files.readAllBytes(SPEC));
        for (Object o : (List<?>) doc.get("limits")) {
            Map<?, ?> l = (Map<?, ?>) o;
            spec.put((String) l.get("name"), ((Number) l.get("value")).longValue());
            if (!"wire".equals(l.get("scope")) && !HELD.containsKey((String) l.get("name"))) {
                unheld.add((String) l.get("name"));
            }
        }
        assertEquals(List.of(), unheld, "limits of scope daemon or client no constant here holds");
        for (Map.Entry<String, String[]> e : HELD.entrySet()) {
            assertTrue(spec.containsKey(e.getKey()), e.getKey() + " is no limit of the spec");
            assertEquals(spec.get(e.getKey()), constant(e.getValue()[0], e.getValue()[1]),
                    e.getKey() + " is " + e.getValue()[0] + "." + e.getValue()[1]);
        }
        assertEquals(spec.get("answer_wait"), (long) ClientOptions.defaults().requestTimeoutMillis(),
                "the Java client's answer wait by default");
    }

    @Test
    void everyPublicConnectionDefaultIsInTheSpec() {
        List<String> named = new ArrayList<>();
        HELD.values().stream().filter(h -> h[0].equals(ConnectionLimits.class.getName())).forEach(h -> named.add(h[1]));
        List<String> unnamed = new ArrayList<>();
        for (Field f : ConnectionLimits.class.getFields()) {
            int m = f.getModifiers();
            if (Modifier.isStatic(m) && Modifier.isFinal(m) && !named.contains(f.getName())
                    && !NOT_PROTOCOL.containsKey(f.getName())) {
                unnamed.add(f.getName());
            }
        }
        assertEquals(List.of(), unnamed, "public defaults of ConnectionLimits that docs/protocol-spec.json does not name");
    }

    private static long constant(String className, String field) throws ReflectiveOperationException {
        Field f = Class.forName(className).getDeclaredField(field);
        assertTrue(Modifier.isStatic(f.getModifiers()) && Modifier.isFinal(f.getModifiers()), className + "." + field);
        f.setAccessible(true);
        return ((Number) f.get(null)).longValue();
    }
}
