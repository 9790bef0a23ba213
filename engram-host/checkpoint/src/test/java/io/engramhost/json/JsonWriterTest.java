package io.engramhost.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

class JsonWriterTest {

    @Test
    void shouldWriteCompactlyInMapOrder() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("z", 1L);
        m.put("a", Arrays.asList(true, null, 2.5, "s"));
        m.put("shape", new long[] {384, 256});
        m.put("ids", new int[] {});
        m.put("nested", new TreeMap<>(Map.of("y", 2, "x", 1)));
        assertEquals("{\"z\":1,\"a\":[true,null,2.5,\"s\"],\"shape\":[384,256],\"ids\":[],\"nested\":{\"x\":1,\"y\":2}}",
                JsonWriter.write(m));
    }

    @Test
    void shouldEscapeStrings() {
        assertEquals("\"q\\\"b\\\\n\\nr\\rt\\tb\\bf\\f\\u0001\\u001f\\u007f\\u2028\"",
                JsonWriter.write("q\"b\\n\nr\rt\tb\bf\f\u0001\u001f\u007f\u2028"));
        assertEquals("\"\u00e9\ud83d\ude00/\"", JsonWriter.write("\u00e9\ud83d\ude00/"), "non-ASCII as UTF-8, '/' as is");
        assertEquals("\"\\ud800x\"", JsonWriter.write("\ud800x"), "a lone surrogate stays an escape");
    }

    @Test
    void shouldRoundTripThroughTheReader() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("name", "engram.layers.1.embedding.weight \"\u00e9\" \\ \n");
        m.put("n", Long.MIN_VALUE);
        m.put("d", 1.0E-300);
        m.put("big", 1.5E300);
        List<Object> list = new ArrayList<>();
        list.add(m.get("n"));
        list.add(Map.of());
        m.put("list", list);
        assertEquals(m, JsonReader.parse(JsonWriter.write(m)));
    }

    @Test
    void shouldRefuseWhatJsonCannotHold() {
        IllegalArgumentException nan = assertThrows(IllegalArgumentException.class,
                () -> JsonWriter.write(Map.of("a", List.of(1.0, Double.NaN))));
        assertEquals("$.a[1]: NaN has no JSON form", nan.getMessage());
        IllegalArgumentException obj = assertThrows(IllegalArgumentException.class,
                () -> JsonWriter.write(List.of(new Object())));
        assertEquals("$[0]: cannot write java.lang.Object as JSON", obj.getMessage());
        IllegalArgumentException key = assertThrows(IllegalArgumentException.class,
                () -> JsonWriter.write(Map.of(1, 2)));
        assertEquals("$: object key 1 is not a String", key.getMessage());
    }
}
