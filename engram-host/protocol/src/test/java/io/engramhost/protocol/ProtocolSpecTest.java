package io.engramhost.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.checkpoint.DType;
import io.engramhost.checkpoint.Limits;
import io.engramhost.json.JsonReader;
import io.engramhost.os.FdMessages;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The protocol module's constants against docs/protocol-spec.json (docs/protocol.md's numbers as data), both ways:
 * every message type, error code, region kind, state, expectation kind, connection phase, dtype and limit of the
 * spec is the code's, and every public numeric constant of the wire classes is one the spec names. The daemon's
 * own limits (connections, deadlines, request memory) are DaemonSpecTest's; the Python and C clients have tests of
 * their own against the same file.
 */
class ProtocolSpecTest {
    private static final Path SPEC = Path.of(System.getProperty("user.dir")).getParent().getParent()
            .resolve("docs/protocol-spec.json");
    /** The classes whose public numeric constants are the wire's: each must be named below. */
    private static final List<Class<?>> WIRE = List.of(ProtocolDescriptor.class, Handover.class, SocketPaths.class,
            ErrorReply.class, FdMessages.class, Limits.class);
    /** Each spec limit the Java code holds, and the constants that hold it (Class.FIELD). */
    private static final Map<String, List<String>> LIMITS = new LinkedHashMap<>();
    /** The spec's framing numbers and the constants that hold them. */
    private static final Map<String, List<String>> FRAMING = new LinkedHashMap<>();

    static {
        LIMITS.put("hello_payload", List.of("ProtocolDescriptor.MAX_HELLO"));
        LIMITS.put("request_payload", List.of("ProtocolDescriptor.MAX_REQUEST"));
        LIMITS.put("empty_request_payload", List.of("ProtocolDescriptor.HEADER_BYTES")); // a frame with no body
        LIMITS.put("pre_version_payload", List.of("ProtocolDescriptor.MAX_PRE_VERSION_PAYLOAD"));
        LIMITS.put("v2_payload", List.of("ProtocolDescriptor.MAX_V2_PAYLOAD"));
        LIMITS.put("v1_payload", List.of("ProtocolDescriptor.MAX_PAYLOAD"));
        LIMITS.put("part_body", List.of("ProtocolDescriptor.MAX_PART_BODY"));
        LIMITS.put("frame", List.of("ProtocolDescriptor.MAX_FRAME", "Limits.MAX_MANIFEST_BYTES"));
        LIMITS.put("fd_count", List.of("ProtocolDescriptor.MAX_FDS"));
        LIMITS.put("fds_per_sendmsg", List.of("FdMessages.MAX_FDS_PER_SENDMSG"));
        LIMITS.put("str16", List.of("ProtocolDescriptor.MAX_SHORT_STRING"));
        LIMITS.put("hello_client", List.of("ProtocolDescriptor.MAX_SHORT_STRING"));
        LIMITS.put("device", List.of("ProtocolDescriptor.MAX_DEVICE"));
        LIMITS.put("fingerprint", List.of("ProtocolDescriptor.MAX_FINGERPRINT", "Limits.MAX_FINGERPRINT_BYTES"));
        LIMITS.put("mismatch_lines", List.of("ErrorReply.MAX_LISTED"));
        LIMITS.put("region_count", List.of("ProtocolDescriptor.MAX_FDS", "Limits.MAX_REGIONS"));
        LIMITS.put("table_count", List.of("ProtocolDescriptor.MAX_TABLES", "Limits.MAX_TABLES"));
        LIMITS.put("table_name", List.of("ProtocolDescriptor.MAX_SHORT_STRING", "Limits.MAX_NAME_BYTES"));
        LIMITS.put("rank", List.of("ProtocolDescriptor.MAX_RANK", "Limits.MAX_RANK"));
        LIMITS.put("error_message", List.of("ProtocolDescriptor.MAX_SHORT_STRING"));
        LIMITS.put("error_details", List.of("ProtocolDescriptor.MAX_DETAILS"));
        LIMITS.put("error_detail", List.of("ProtocolDescriptor.MAX_SHORT_STRING"));
        LIMITS.put("answer_wait", List.of("ProtocolDescriptor.DEFAULT_REQUEST_TIMEOUT_MILLIS"));
        LIMITS.put("handover_layout", List.of("Handover.LAYOUT"));
        LIMITS.put("handover_served", List.of("Handover.MAX_SERVED"));
        LIMITS.put("handover_connections", List.of("Handover.MAX_CONNECTIONS"));
        LIMITS.put("handover_report", List.of("Handover.MAX_REPORT"));
        LIMITS.put("socket_path", List.of("SocketPaths.MAX_PATH_BYTES"));
        FRAMING.put("magic", List.of("ProtocolDescriptor.MAGIC"));
        FRAMING.put("frame_header_bytes", List.of("ProtocolDescriptor.HEADER_BYTES"));
        FRAMING.put("message_header_bytes", List.of("FdMessages.HEADER_BYTES"));
        FRAMING.put("continued_bit", List.of("ProtocolDescriptor.CONTINUED"));
        FRAMING.put("filler_byte", List.of("FdMessages.FILLER"));
        FRAMING.put("hello_version", List.of("ProtocolDescriptor.MIN_VERSION"));
    }

    private static Map<String, Object> spec;

    @BeforeAll
    static void readSpec() throws IOException {
        spec = map(JsonReader.parse(Files.readAllBytes(SPEC)));
        assertEquals("engram-host-protocol-spec", spec.get("format"));
    }

    @Test
    void messageTypesAreTheSpecs() {
        Map<String, Long> code = new TreeMap<>();
        for (MessageType t : MessageType.values()) {
            code.put(t.name(), (long) t.code());
        }
        assertEquals(entries("message_types", "name", "code"), code);
        Map<String, Object> reserved = map(spec.get("reserved_types"));
        for (MessageType t : MessageType.values()) {
            assertFalse(t.code() >= number(reserved, "from") && t.code() <= number(reserved, "to"), t + " is reserved");
        }
        for (Object o : list(spec.get("message_types"))) { // PART and the handover are version 2 only
            Map<String, Object> t = map(o);
            boolean v2Only = list(t.get("versions")).equals(List.of(2L));
            assertEquals(MessageType.of((int) number(t, "code")) == MessageType.PART || "daemons".equals(t.get("peers")),
                    v2Only, t.get("name") + "'s versions");
        }
    }

    @Test
    void errorCodesAreTheSpecs() {
        Map<String, Long> code = new TreeMap<>();
        Map<String, Object> retryable = new TreeMap<>();
        for (ErrorCode c : ErrorCode.values()) {
            code.put(c.name(), (long) c.code());
            retryable.put(c.name(), c.retryable());
        }
        assertEquals(entries("error_codes", "name", "code"), code);
        assertEquals(entries("error_codes", "name", "retryable"), retryable);
    }

    /** Every kind on the wire; RegionKind.DISK (a client's own memory, loaded from disk) never is. */
    @Test
    void regionKindsAreTheSpecs() {
        Map<Long, Object> backend = new TreeMap<>();
        Map<Long, Object> memfd = new TreeMap<>();
        for (RegionKind k : RegionKind.values()) {
            if (k != RegionKind.DISK) {
                backend.put((long) k.code(), k.backend());
                memfd.put((long) k.code(), k.memfd());
            }
        }
        assertEquals(entries("region_kinds", "code", "backend"), backend);
        assertEquals(entries("region_kinds", "code", "memfd"), memfd);
        assertFalse(entries("region_kinds", "code", "backend").containsKey((long) RegionKind.DISK.code()));
    }

    @Test
    void statesKindsAndPhasesAreTheSpecs() {
        Map<Long, Object> states = new TreeMap<>();
        for (DaemonState s : DaemonState.values()) {
            states.put((long) s.code(), s.wireName());
        }
        assertEquals(entries("daemon_states", "code", "name"), states);
        Map<Long, Object> kinds = new TreeMap<>();
        for (Expectation.Kind k : Expectation.Kind.values()) {
            kinds.put((long) k.code, k.name().toLowerCase(Locale.ROOT));
        }
        assertEquals(entries("expectation_kinds", "code", "name"), kinds);
        Map<Long, Object> phases = new TreeMap<>();
        for (ConnectionPhase p : ConnectionPhase.values()) {
            phases.put((long) p.code(), p.name());
        }
        assertEquals(entries("connection_phases", "code", "name"), phases);
    }

    @Test
    void dtypesAreTheSpecs() {
        Map<String, Object> bits = new TreeMap<>();
        for (DType t : DType.values()) {
            bits.put(t.name(), (long) t.bits());
        }
        assertEquals(entries("dtypes", "name", "bits"), bits);
    }

    @Test
    void framingAndLimitsAreTheSpecs() throws Exception {
        Map<String, Object> framing = map(spec.get("framing"));
        for (Map.Entry<String, List<String>> e : FRAMING.entrySet()) {
            for (String field : e.getValue()) {
                assertEquals(number(framing, e.getKey()), value(field), e.getKey() + " is " + field);
            }
        }
        List<Object> versions = list(framing.get("versions"));
        assertEquals(List.of((long) ProtocolDescriptor.MIN_VERSION, (long) ProtocolDescriptor.MAX_VERSION),
                List.of(versions.get(0), versions.get(versions.size() - 1)), "versions");
        Map<String, Long> limits = limits();
        for (Map.Entry<String, List<String>> e : LIMITS.entrySet()) {
            assertTrue(limits.containsKey(e.getKey()), e.getKey() + " is no limit of the spec");
            for (String field : e.getValue()) {
                assertEquals(limits.get(e.getKey()), value(field), e.getKey() + " is " + field);
            }
        }
    }

    /** Nothing of the spec's wire missing from the code: every limit of scope "wire" is held by a constant above. */
    @Test
    void everyWireLimitOfTheSpecIsAConstant() {
        List<String> missing = new ArrayList<>();
        for (Object o : list(spec.get("limits"))) {
            Map<String, Object> l = map(o);
            if ("wire".equals(l.get("scope")) && !LIMITS.containsKey((String) l.get("name"))) {
                missing.add((String) l.get("name"));
            }
        }
        assertEquals(List.of(), missing, "limits of the spec no Java constant holds");
    }

    /** Nothing of the code missing from the spec: every public numeric constant of the wire classes is named above. */
    @Test
    void everyWireConstantIsInTheSpec() {
        TreeSet<String> named = new TreeSet<>();
        LIMITS.values().forEach(named::addAll);
        FRAMING.values().forEach(named::addAll);
        named.add("ProtocolDescriptor.MAX_VERSION"); // the last of framing.versions
        List<String> unnamed = new ArrayList<>();
        for (Class<?> c : WIRE) {
            for (Field f : c.getFields()) {
                int m = f.getModifiers();
                boolean numeric = f.getType() == int.class || f.getType() == long.class || f.getType() == byte.class;
                if (Modifier.isStatic(m) && Modifier.isFinal(m) && numeric
                        && !named.contains(c.getSimpleName() + "." + f.getName())) {
                    unnamed.add(c.getSimpleName() + "." + f.getName());
                }
            }
        }
        assertEquals(List.of(), unnamed, "public constants docs/protocol-spec.json does not name");
    }

    private static Map<String, Long> limits() {
        Map<String, Long> out = new TreeMap<>();
        for (Object o : list(spec.get("limits"))) {
            Map<String, Object> l = map(o);
            out.put((String) l.get("name"), number(l, "value"));
        }
        return out;
    }

    /** The value of constant {@code Class.FIELD} of one of {@link #WIRE}, as a long (a byte unsigned). */
    private static long value(String field) throws ReflectiveOperationException {
        String[] p = field.split("\\.");
        for (Class<?> c : WIRE) {
            if (c.getSimpleName().equals(p[0])) {
                Object v = c.getField(p[1]).get(null);
                return v instanceof Byte b ? b & 0xff : ((Number) v).longValue();
            }
        }
        throw new IllegalArgumentException(field + " is not a constant of " + WIRE);
    }

    /** The spec's list {@code key} as a map of each entry's {@code k} to its {@code v}. */
    @SuppressWarnings("unchecked")
    private static <K extends Comparable<K>, V> Map<K, V> entries(String key, String k, String v) {
        Map<K, V> out = new TreeMap<>();
        for (Object o : list(spec.get(key))) {
            Map<String, Object> e = map(o);
            assertTrue(out.put((K) e.get(k), (V) e.get(v)) == null, key + ": " + e.get(k) + " twice");
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object o) {
        return (List<Object>) o;
    }

    private static long number(Map<String, Object> m, String key) {
        return ((Number) m.get(key)).longValue();
    }
}
