package io.engramhost.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonReaderTest {

    @Test
    void shouldReadEveryKindOfValue() {
        Object v = JsonReader.parse(" {\"b\": [1, -2, 3.5, 1e3, true, false, null], \"a\": {\"s\": \"x\\ty\"}} \n");
        Map<?, ?> map = assertInstanceOf(Map.class, v);
        assertEquals(List.of("b", "a"), List.copyOf(map.keySet()), "key order kept");
        List<?> list = (List<?>) map.get("b");
        assertEquals(1L, list.get(0));
        assertEquals(-2L, list.get(1));
        assertEquals(3.5, list.get(2));
        assertEquals(1000.0, list.get(3));
        assertEquals(Boolean.TRUE, list.get(4));
        assertEquals(Boolean.FALSE, list.get(5));
        assertNull(list.get(6));
        assertEquals("x\ty", ((Map<?, ?>) map.get("a")).get("s"));
    }

    @Test
    void shouldReadNumbersAsLongWhenIntegral() {
        assertEquals(Long.MAX_VALUE, JsonReader.parse("9223372036854775807"));
        assertEquals(Long.MIN_VALUE, JsonReader.parse("-9223372036854775808"));
        assertEquals(0L, JsonReader.parse("-0"));
        assertEquals(-0.25, JsonReader.parse("-2.5E-1"));
        assertEquals(2.0, JsonReader.parse("2.0"));
    }

    @Test
    void shouldDecodeEscapesAndUtf8() {
        assertEquals("\"\\/\b\f\n\r\t\u00e9\ud83d\ude00", JsonReader.parse("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00E9\\ud83d\\ude00\""));
        assertEquals("\u00e9\u20ac\ud83d\ude00", JsonReader.parse("\"\u00e9\u20ac\ud83d\ude00\""));
    }

    @Test
    void shouldNameBytePositionOfSyntaxErrors() {
        assertError("{\"a\" 1}", "at byte 5: unexpected '1', expected ':' after key");
        assertError("{\"a\":1,}", "at byte 7: unexpected '}', expected a string key");
        assertError("[1 2]", "at byte 3: unexpected '2', expected ',' or ']' in array");
        assertError("{\"a\":1 \"b\":2}", "at byte 7: unexpected '\"', expected ',' or '}' in object");
        assertError("[1,]", "at byte 3: unexpected ']', expected a value");
        assertError("", "at byte 0: unexpected end of input, expected a value");
        assertError("[1", "at byte 2: unexpected end of input, expected ',' or ']' in array");
        assertError("{} x", "at byte 3: unexpected 'x' after the value");
        assertError("tru", "at byte 0: invalid literal, expected true");
        assertError("nul", "at byte 0: invalid literal, expected null");
        assertError("'a'", "at byte 0: unexpected ''', expected a value");
    }

    @Test
    void shouldRefuseBadNumbers() {
        assertError("01", "at byte 0: leading zero in number");
        assertError("-", "at byte 1: expected a digit in number");
        assertError("1.", "at byte 2: expected a digit after '.' in number");
        assertError("1e", "at byte 2: expected a digit in exponent");
        assertError("+1", "at byte 0: unexpected '+', expected a value");
        assertError("9223372036854775808", "at byte 0: integer 9223372036854775808 does not fit in 64 bits");
        assertError("1e400", "at byte 0: number 1e400 is out of range");
        assertError("NaN", "at byte 0: unexpected 'N', expected a value");
    }

    @Test
    void shouldRefuseBadStrings() {
        assertError("\"abc", "at byte 0: unterminated string");
        assertError("\"a\nb\"", "at byte 2: control character 0xa in string (must be escaped)");
        assertError("\"\\x\"", "at byte 1: invalid escape \\x");
        assertError("\"\\u12zz\"", "at byte 1: invalid hex digit in \\u escape");
        assertError("\"\\u12", "at byte 1: truncated \\u escape");
        assertError("\"\\ud800\"", "at byte 1: unpaired surrogate \\ud800");
        assertError("\"\\udc00\"", "at byte 1: unpaired surrogate \\udc00");
        assertBytesError(new byte[] {'"', (byte) 0xff, '"'}, "at byte 1: invalid UTF-8 byte 0xff");
        assertBytesError(new byte[] {'"', (byte) 0xc3, '"'}, "at byte 1: invalid UTF-8 sequence");
        assertBytesError(new byte[] {'"', (byte) 0xc0, (byte) 0x80, '"'},
                "at byte 1: invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)");
        assertBytesError(new byte[] {'"', (byte) 0xed, (byte) 0xa0, (byte) 0x80, '"'},
                "at byte 1: invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)");
    }

    @Test
    void shouldRefuseDuplicateKeys() {
        assertError("{\"a\":1,\"b\":2,\"a\":3}", "at byte 13: duplicate key \"a\"");
    }

    @Test
    void shouldLimitNestingDepth() {
        char[] open = new char[65];
        Arrays.fill(open, '[');
        char[] close = new char[65];
        Arrays.fill(close, ']');
        String deep = new String(open) + new String(close);
        assertError(deep, "at byte 64: nesting deeper than 64 levels");
        String ok = deep.substring(1, deep.length() - 1);
        assertInstanceOf(List.class, JsonReader.parse(ok));
        byte[] shallow = "[[1]]".getBytes(StandardCharsets.UTF_8);
        JsonException e = assertThrows(JsonException.class, () -> JsonReader.parse(shallow, 0, shallow.length, 1));
        assertEquals("at byte 1: nesting deeper than 1 levels", e.getMessage());
    }

    @Test
    void shouldCountPositionsFromTheSliceOffset() {
        byte[] buf = "xxxx[1,,]yy".getBytes(StandardCharsets.UTF_8);
        JsonException e = assertThrows(JsonException.class, () -> JsonReader.parse(buf, 4, 5, 8));
        assertEquals(3, e.position());
        byte[] ok = "xx[7]yy".getBytes(StandardCharsets.UTF_8);
        assertEquals(List.of(7L), JsonReader.parse(ok, 2, 3, 8));
    }

    private static void assertError(String text, String message) {
        JsonException e = assertThrows(JsonException.class, () -> JsonReader.parse(text), text);
        assertEquals(message, e.getMessage(), text);
    }

    private static void assertBytesError(byte[] bytes, String message) {
        JsonException e = assertThrows(JsonException.class, () -> JsonReader.parse(bytes));
        assertEquals(message, e.getMessage());
    }
}
