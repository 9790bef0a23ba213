package io.engramhost.json;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A strict RFC 8259 JSON reader over UTF-8 bytes. Objects become {@link LinkedHashMap} (key order kept),
 * arrays {@link List}, integral numbers {@link Long}, other numbers {@link Double}, then String, Boolean
 * and null. Beyond the RFC it refuses duplicate keys, integers that do not fit 64 bits, lone surrogates
 * and nesting deeper than a limit. Every error is a {@link JsonException} naming the byte position.
 */
public final class JsonReader {
    /** Default nesting limit: deep enough for any header or index, shallow enough for the stack. */
    public static final int DEFAULT_MAX_DEPTH = 64;

    private final byte[] in;
    private final int base;
    private final int end;
    private final int maxDepth;
    private int pos;
    private final StringBuilder sb = new StringBuilder();

    private JsonReader(byte[] in, int offset, int length, int maxDepth) {
        this.in = in;
        this.pos = offset;
        this.base = offset;
        this.end = offset + length;
        this.maxDepth = maxDepth;
    }

    public static Object parse(String text) {
        return parse(text.getBytes(StandardCharsets.UTF_8));
    }

    public static Object parse(byte[] utf8) {
        return parse(utf8, 0, utf8.length, DEFAULT_MAX_DEPTH);
    }

    /**
     * Parses exactly one value from {@code utf8[offset, offset+length)}; only whitespace may follow it.
     * Error positions count from {@code offset}.
     */
    public static Object parse(byte[] utf8, int offset, int length, int maxDepth) {
        if (offset < 0 || length < 0 || offset + length > utf8.length || offset + length < 0) {
            throw new IndexOutOfBoundsException("offset " + offset + ", length " + length + " of " + utf8.length);
        }
        if (maxDepth < 1) {
            throw new IllegalArgumentException("maxDepth must be at least 1, was " + maxDepth);
        }
        JsonReader r = new JsonReader(utf8, offset, length, maxDepth);
        r.skipWhitespace();
        Object value = r.value(0);
        r.skipWhitespace();
        if (r.pos != r.end) {
            throw r.error(r.pos, "unexpected " + r.describe(r.pos) + " after the value");
        }
        return value;
    }

    private JsonException error(int at, String problem) {
        return new JsonException(at - base, problem);
    }

    private Object value(int depth) {
        if (pos >= end) {
            throw error(pos, "unexpected end of input, expected a value");
        }
        byte b = in[pos];
        switch (b) {
            case '{':
                return object(depth + 1);
            case '[':
                return array(depth + 1);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (b == '-' || (b >= '0' && b <= '9')) {
                    return number();
                }
                throw error(pos, "unexpected " + describe(pos) + ", expected a value");
        }
    }

    private void enter(int depth) {
        if (depth > maxDepth) {
            throw error(pos, "nesting deeper than " + maxDepth + " levels");
        }
    }

    private Map<String, Object> object(int depth) {
        enter(depth);
        pos++; // '{'
        Map<String, Object> map = new LinkedHashMap<>();
        skipWhitespace();
        if (peek() == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            int keyAt = pos;
            if (peek() != '"') {
                throw error(pos, "unexpected " + describe(pos) + ", expected a string key");
            }
            String key = string();
            skipWhitespace();
            expect(':', "after key");
            skipWhitespace();
            Object v = value(depth);
            if (map.containsKey(key)) {
                throw error(keyAt, "duplicate key \"" + key + "\"");
            }
            map.put(key, v);
            skipWhitespace();
            int c = peek();
            if (c == ',') {
                pos++;
            } else if (c == '}') {
                pos++;
                return map;
            } else {
                throw error(pos, "unexpected " + describe(pos) + ", expected ',' or '}' in object");
            }
        }
    }

    private List<Object> array(int depth) {
        enter(depth);
        pos++; // '['
        List<Object> list = new ArrayList<>();
        skipWhitespace();
        if (peek() == ']') {
            pos++;
            return Collections.unmodifiableList(list);
        }
        while (true) {
            skipWhitespace();
            list.add(value(depth));
            skipWhitespace();
            int c = peek();
            if (c == ',') {
                pos++;
            } else if (c == ']') {
                pos++;
                return Collections.unmodifiableList(list);
            } else {
                throw error(pos, "unexpected " + describe(pos) + ", expected ',' or ']' in array");
            }
        }
    }

    private Object literal(String word, Object value) {
        int start = pos;
        for (int i = 0; i < word.length(); i++) {
            if (pos >= end || in[pos] != word.charAt(i)) {
                throw error(start, "invalid literal, expected " + word);
            }
            pos++;
        }
        return value;
    }

    private Object number() {
        int start = pos;
        boolean integral = true;
        if (peek() == '-') {
            pos++;
        }
        if (peek() == '0') {
            pos++;
            if (isDigit(peek())) {
                throw error(start, "leading zero in number");
            }
        } else if (isDigit(peek())) {
            digits();
        } else {
            throw error(pos, "expected a digit in number");
        }
        if (peek() == '.') {
            integral = false;
            pos++;
            if (!isDigit(peek())) {
                throw error(pos, "expected a digit after '.' in number");
            }
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            integral = false;
            pos++;
            if (peek() == '+' || peek() == '-') {
                pos++;
            }
            if (!isDigit(peek())) {
                throw error(pos, "expected a digit in exponent");
            }
            digits();
        }
        String text = new String(in, start, pos - start, StandardCharsets.US_ASCII);
        if (integral) {
            try {
                return Long.parseLong(text);
            } catch (NumberFormatException e) {
                throw error(start, "integer " + text + " does not fit in 64 bits");
            }
        }
        double d = Double.parseDouble(text);
        if (Double.isInfinite(d)) {
            throw error(start, "number " + text + " is out of range");
        }
        return d;
    }

    private void digits() {
        while (isDigit(peek())) {
            pos++;
        }
    }

    private static boolean isDigit(int c) {
        return c >= '0' && c <= '9';
    }

    private String string() {
        int start = pos;
        pos++; // opening quote
        sb.setLength(0);
        while (true) {
            if (pos >= end) {
                throw error(start, "unterminated string");
            }
            int b = in[pos] & 0xff;
            if (b == '"') {
                pos++;
                return sb.toString();
            } else if (b == '\\') {
                escape();
            } else if (b < 0x20) {
                throw error(pos, "control character 0x" + Integer.toHexString(b) + " in string (must be escaped)");
            } else if (b < 0x80) {
                sb.append((char) b);
                pos++;
            } else {
                utf8(b);
            }
        }
    }

    private void escape() {
        int at = pos;
        pos++;
        if (pos >= end) {
            throw error(at, "unterminated escape");
        }
        int c = in[pos++];
        switch (c) {
            case '"': sb.append('"'); break;
            case '\\': sb.append('\\'); break;
            case '/': sb.append('/'); break;
            case 'b': sb.append('\b'); break;
            case 'f': sb.append('\f'); break;
            case 'n': sb.append('\n'); break;
            case 'r': sb.append('\r'); break;
            case 't': sb.append('\t'); break;
            case 'u': unicodeEscape(at); break;
            default:
                throw error(at, "invalid escape \\" + (c >= 0x20 && c < 0x7f ? String.valueOf((char) c) : "0x"
                        + Integer.toHexString(c & 0xff)));
        }
    }

    private void unicodeEscape(int at) {
        char c = hex4(at);
        if (Character.isHighSurrogate(c)) {
            if (pos + 1 < end && in[pos] == '\\' && in[pos + 1] == 'u') {
                pos += 2;
                char low = hex4(at);
                if (Character.isLowSurrogate(low)) {
                    sb.append(c).append(low);
                    return;
                }
            }
            throw error(at, "unpaired surrogate \\u" + Integer.toHexString(c));
        }
        if (Character.isLowSurrogate(c)) {
            throw error(at, "unpaired surrogate \\u" + Integer.toHexString(c));
        }
        sb.append(c);
    }

    private char hex4(int at) {
        if (pos + 4 > end) {
            throw error(at, "truncated \\u escape");
        }
        int v = 0;
        for (int i = 0; i < 4; i++) {
            int d = Character.digit(in[pos + i], 16);
            if (d < 0) {
                throw error(at, "invalid hex digit in \\u escape");
            }
            v = v << 4 | d;
        }
        pos += 4;
        return (char) v;
    }

    /** Decodes one multi-byte UTF-8 sequence starting with {@code b0}; refuses overlong and surrogate forms. */
    private void utf8(int b0) {
        int at = pos;
        int n;
        int cp;
        int min;
        if ((b0 & 0xe0) == 0xc0) {
            n = 1; cp = b0 & 0x1f; min = 0x80;
        } else if ((b0 & 0xf0) == 0xe0) {
            n = 2; cp = b0 & 0x0f; min = 0x800;
        } else if ((b0 & 0xf8) == 0xf0) {
            n = 3; cp = b0 & 0x07; min = 0x10000;
        } else {
            throw error(at, "invalid UTF-8 byte 0x" + Integer.toHexString(b0));
        }
        if (pos + n >= end) {
            throw error(at, "truncated UTF-8 sequence");
        }
        for (int i = 1; i <= n; i++) {
            int b = in[pos + i] & 0xff;
            if ((b & 0xc0) != 0x80) {
                throw error(at, "invalid UTF-8 sequence");
            }
            cp = cp << 6 | (b & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            throw error(at, "invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)");
        }
        sb.appendCodePoint(cp);
        pos += n + 1;
    }

    private void expect(char c, String where) {
        if (peek() != c) {
            throw error(pos, "unexpected " + describe(pos) + ", expected '" + c + "' " + where);
        }
        pos++;
    }

    private int peek() {
        return pos < end ? in[pos] & 0xff : -1;
    }

    private void skipWhitespace() {
        while (pos < end) {
            byte b = in[pos];
            if (b == ' ' || b == '\t' || b == '\n' || b == '\r') {
                pos++;
            } else {
                return;
            }
        }
    }

    private String describe(int at) {
        if (at >= end) {
            return "end of input";
        }
        int b = in[at] & 0xff;
        return b >= 0x21 && b < 0x7f ? "'" + (char) b + "'" : "byte 0x" + Integer.toHexString(b);
    }
}
