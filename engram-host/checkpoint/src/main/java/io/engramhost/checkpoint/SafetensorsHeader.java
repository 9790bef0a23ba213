package io.engramhost.checkpoint;

import io.engramhost.json.JsonException;
import io.engramhost.json.JsonReader;
import io.engramhost.util.Text;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Validates a safetensors JSON header against the data section that follows it. Checks, in this order:
 * valid JSON object (unique keys); {@code __metadata__} a string-to-string map; for every tensor: an
 * object with exactly dtype, shape, data_offsets; a known dtype; a shape of non-negative integers;
 * data_offsets two integers with begin <= end <= data length; end - begin == dtype x shape. Then, over
 * all tensors sorted by offset: no overlap, no hole, and the last end is the end of the file.
 */
final class SafetensorsHeader {
    private static final String METADATA = "__metadata__";
    private static final Set<String> FIELDS = Set.of("dtype", "shape", "data_offsets");

    private final Map<String, String> metadata;
    private final List<TensorInfo> tensors;

    private SafetensorsHeader(Map<String, String> metadata, List<TensorInfo> tensors) {
        this.metadata = metadata;
        this.tensors = tensors;
    }

    Map<String, String> metadata() {
        return metadata;
    }

    /** In header order. */
    List<TensorInfo> tensors() {
        return tensors;
    }

    private record Span(String name, long begin, long end) {
    }

    static SafetensorsHeader parse(String where, Path path, byte[] header, long dataOffset, long dataLength) {
        Object root;
        try {
            root = JsonReader.parse(header, 0, header.length, JsonReader.DEFAULT_MAX_DEPTH);
        } catch (JsonException e) {
            throw new CheckpointException(where + ": header JSON at byte " + e.position() + " (file offset "
                    + (8 + e.position()) + "): " + e.problem());
        }
        if (!(root instanceof Map<?, ?> map)) {
            throw new CheckpointException(where + ": header is not a JSON object");
        }
        Map<String, String> metadata = Map.of();
        List<TensorInfo> tensors = new ArrayList<>();
        List<Span> spans = new ArrayList<>();
        for (Map.Entry<?, ?> e : map.entrySet()) {
            String name = (String) e.getKey();
            if (name.equals(METADATA)) {
                metadata = metadata(where, e.getValue());
                continue;
            }
            if (name.isEmpty()) {
                throw new CheckpointException(where + ": a tensor has an empty name");
            }
            if (!Text.isOneLine(name)) {   // printed by inspect, status and the logs: refused here, once
                throw new CheckpointException(where + ": tensor '" + Text.oneLine(name) + "': its name holds a control"
                        + " character or a line separator, which no tensor name may; export the file again with"
                        + " printable names");
            }
            String at = where + ": tensor '" + name + "': ";
            if (!(e.getValue() instanceof Map<?, ?> fields)) {
                throw new CheckpointException(at + "entry is not an object but " + kind(e.getValue()));
            }
            for (Object key : fields.keySet()) {
                if (!FIELDS.contains(key)) {
                    throw new CheckpointException(at + "unexpected field '" + key
                            + "' (expected dtype, shape, data_offsets)");
                }
            }
            DType dtype = dtype(at, field(at, fields, "dtype"));
            long[] shape = integers(at, "shape", field(at, fields, "shape"), -1);
            long[] offsets = integers(at, "data_offsets", field(at, fields, "data_offsets"), 2);
            long begin = offsets[0];
            long end = offsets[1];
            if (begin > end) {
                throw new CheckpointException(at + "data_offsets [" + begin + ", " + end + "] end before they begin");
            }
            if (end > dataLength) {
                throw new CheckpointException(at + "data_offsets [" + begin + ", " + end
                        + "] end past the data section (" + dataLength + " bytes)");
            }
            long needed;
            try {
                needed = dtype.byteLength(shape);
            } catch (IllegalArgumentException bad) {
                throw new CheckpointException(at + bad.getMessage());
            }
            if (needed != end - begin) {
                throw new CheckpointException(at + dtype + " " + Arrays.toString(shape) + " needs " + needed
                        + " bytes but data_offsets give " + (end - begin));
            }
            tensors.add(new TensorInfo(name, dtype, shape, path, dataOffset + begin, end - begin));
            spans.add(new Span(name, begin, end));
        }
        checkLayout(where, spans, dataLength);
        return new SafetensorsHeader(metadata, Collections.unmodifiableList(tensors));
    }

    /** Sorted by offset, the spans must tile [0, dataLength) exactly: the format forbids holes. */
    private static void checkLayout(String where, List<Span> spans, long dataLength) {
        spans.sort(Comparator.comparingLong(Span::begin).thenComparingLong(Span::end).thenComparing(Span::name));
        long expected = 0;
        Span previous = null;
        for (Span s : spans) {
            String at = where + ": tensor '" + s.name + "': data_offsets [" + s.begin + ", " + s.end + "] ";
            if (s.begin < expected) {
                throw new CheckpointException(at + "overlap tensor '" + previous.name + "' [" + previous.begin + ", "
                        + previous.end + "]");
            }
            if (s.begin > expected) {
                throw new CheckpointException(at + "leave a hole of " + (s.begin - expected) + " bytes after "
                        + (previous == null ? "the start of the data section" : "tensor '" + previous.name + "'"));
            }
            expected = s.end;
            previous = s;
        }
        if (expected != dataLength) {
            throw new CheckpointException(where + ": the data section has " + dataLength + " bytes but the tensors"
                    + " cover " + expected + ": " + (dataLength - expected) + " bytes at the end belong to no tensor");
        }
    }

    private static Map<String, String> metadata(String where, Object value) {
        if (!(value instanceof Map<?, ?> m)) {
            throw new CheckpointException(where + ": __metadata__ is not an object but " + kind(value));
        }
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> e : m.entrySet()) {
            if (!(e.getValue() instanceof String s)) {
                throw new CheckpointException(where + ": __metadata__ '" + e.getKey()
                        + "' is not a string but " + kind(e.getValue()));
            }
            out.put((String) e.getKey(), s);
        }
        return Collections.unmodifiableMap(out);
    }

    private static Object field(String at, Map<?, ?> fields, String key) {
        if (!fields.containsKey(key)) {
            throw new CheckpointException(at + "missing '" + key + "'");
        }
        return fields.get(key);
    }

    private static DType dtype(String at, Object value) {
        if (!(value instanceof String s)) {
            throw new CheckpointException(at + "dtype is not a string but " + kind(value));
        }
        try {
            return DType.parse(s);
        } catch (IllegalArgumentException e) {
            throw new CheckpointException(at + e.getMessage());
        }
    }

    /** A list of non-negative integers; {@code count} >= 0 requires exactly that many. */
    private static long[] integers(String at, String field, Object value, int count) {
        String expected = count < 0 ? "a list of non-negative integers" : "a list of " + count
                + " non-negative integers";
        if (!(value instanceof List<?> list)) {
            throw new CheckpointException(at + field + " is not " + expected + " but " + kind(value));
        }
        if (count >= 0 && list.size() != count) {
            throw new CheckpointException(at + field + " has " + list.size() + " elements, expected " + count);
        }
        long[] out = new long[list.size()];
        for (int i = 0; i < out.length; i++) {
            Object v = list.get(i);
            if (!(v instanceof Long l) || l < 0) {
                throw new CheckpointException(at + field + " is not " + expected + ": element " + i + " is "
                        + (v instanceof Long ? v : kind(v)));
            }
            out[i] = l;
        }
        return out;
    }

    static String kind(Object v) {
        if (v == null) {
            return "null";
        } else if (v instanceof String s) {
            return "the string \"" + (s.length() > 40 ? s.substring(0, 40) + "..." : s) + "\"";
        } else if (v instanceof Long || v instanceof Double) {
            return "the number " + v;
        } else if (v instanceof Boolean) {
            return v.toString();
        } else if (v instanceof List) {
            return "a list";
        }
        return "an object";
    }
}
