package io.engramhost.json;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Map;

/**
 * A compact, deterministic JSON writer: no whitespace, map entries in the map's iteration order (use a
 * LinkedHashMap or TreeMap), and the same escaping every time. Writes Map (String keys), Iterable, arrays
 * of Object/long/int, CharSequence, Boolean, integral numbers, finite Double/Float, BigDecimal, and null.
 * Anything else, or a non-finite number, is an {@link IllegalArgumentException} naming the path to it.
 */
public final class JsonWriter {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private JsonWriter() {
    }

    public static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value);
        return sb.toString();
    }

    public static void write(Appendable out, Object value) {
        try {
            value(out, value, "$");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void value(Appendable out, Object v, String path) throws IOException {
        if (v == null) {
            out.append("null");
        } else if (v instanceof CharSequence) {
            string(out, (CharSequence) v);
        } else if (v instanceof Boolean) {
            out.append(v.toString());
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte
                || v instanceof BigInteger) {
            out.append(v.toString());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException(path + ": " + d + " has no JSON form");
            }
            out.append(v.toString()); // Java's shortest round-trip form is valid JSON (e.g. 1.0E10)
        } else if (v instanceof BigDecimal) {
            out.append(((BigDecimal) v).toString());
        } else if (v instanceof Map) {
            object(out, (Map<?, ?>) v, path);
        } else if (v instanceof Iterable) {
            out.append('[');
            int i = 0;
            for (Object e : (Iterable<?>) v) {
                if (i > 0) {
                    out.append(',');
                }
                value(out, e, path + "[" + i++ + "]");
            }
            out.append(']');
        } else if (v instanceof Object[]) {
            Object[] a = (Object[]) v;
            out.append('[');
            for (int i = 0; i < a.length; i++) {
                if (i > 0) {
                    out.append(',');
                }
                value(out, a[i], path + "[" + i + "]");
            }
            out.append(']');
        } else if (v instanceof long[]) {
            long[] a = (long[]) v;
            out.append('[');
            for (int i = 0; i < a.length; i++) {
                out.append(i > 0 ? "," : "").append(Long.toString(a[i]));
            }
            out.append(']');
        } else if (v instanceof int[]) {
            int[] a = (int[]) v;
            out.append('[');
            for (int i = 0; i < a.length; i++) {
                out.append(i > 0 ? "," : "").append(Integer.toString(a[i]));
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException(path + ": cannot write " + v.getClass().getName() + " as JSON");
        }
    }

    private static void object(Appendable out, Map<?, ?> map, String path) throws IOException {
        out.append('{');
        boolean first = true;
        for (Map.Entry<?, ?> e : map.entrySet()) {
            if (!(e.getKey() instanceof String)) {
                throw new IllegalArgumentException(path + ": object key " + e.getKey() + " is not a String");
            }
            String key = (String) e.getKey();
            if (!first) {
                out.append(',');
            }
            first = false;
            string(out, key);
            out.append(':');
            value(out, e.getValue(), path + "." + key);
        }
        out.append('}');
    }

    /** Writes a quoted JSON string: escapes '"', '\', control characters and lone surrogates. */
    public static void string(Appendable out, CharSequence s) throws IOException {
        out.append('"');
        int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20 || c == 0x7f || c == '\u2028' || c == '\u2029') {
                        unicode(out, c);
                    } else if (Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                        out.append(c).append(s.charAt(++i));
                    } else if (Character.isSurrogate(c)) {
                        unicode(out, c); // a lone surrogate has no UTF-8 form: keep it as an escape
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    private static void unicode(Appendable out, char c) throws IOException {
        out.append("\\u").append(HEX[c >> 12 & 0xf]).append(HEX[c >> 8 & 0xf]).append(HEX[c >> 4 & 0xf])
                .append(HEX[c & 0xf]);
    }
}
