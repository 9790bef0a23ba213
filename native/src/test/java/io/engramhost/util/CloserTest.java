package io.engramhost.util;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class CloserTest {
    private final List<String> closed = new ArrayList<>();

    private AutoCloseable named(String name) {
        return () -> closed.add(name);
    }

    private AutoCloseable failing(String name, Exception e) {
        return () -> {
            closed.add(name);
            throw e;
        };
    }

    @Test
    void shouldCloseInReverseOrderOnceAndSkipNulls() {
        Closer<AutoCloseable> c = new Closer<>();
        AutoCloseable a = named("a");
        assertSame(a, c.add(a));
        c.add(null);
        c.add(named("b"));
        c.add(named("c"));
        assertEquals(3, c.items().size());
        c.close();
        c.close();
        assertEquals(List.of("c", "b", "a"), closed);
        assertTrue(c.items().isEmpty());
    }

    @Test
    void shouldCloseEveryResourceAndRethrowTheFirstFailureWithTheOthersSuppressed() {
        IllegalStateException first = new IllegalStateException("c failed");
        IOException second = new IOException("a failed");
        IllegalStateException thrown = assertThrows(IllegalStateException.class, () -> Closer.closeAll(
                failing("a", second), named("b"), failing("c", first), null));
        assertSame(first, thrown);
        assertEquals(List.of("c", "b", "a"), closed);
        assertEquals(1, thrown.getSuppressed().length);
        Throwable wrapped = thrown.getSuppressed()[0];
        assertSame(second, wrapped.getCause());
        assertTrue(wrapped.getMessage().endsWith("failed: java.io.IOException: a failed"), wrapped.getMessage());
    }

    @Test
    void shouldWrapACheckedFailureNamingTheResource() {
        AutoCloseable r = new AutoCloseable() {
            @Override
            public void close() throws Exception {
                throw new Exception("disk gone");
            }

            @Override
            public String toString() {
                return "table 7";
            }
        };
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> Closer.closeAll(List.of(r)));
        assertEquals("closing table 7 failed: java.lang.Exception: disk gone", e.getMessage());
    }

    @Test
    void shouldAddFailuresToTheCauseAndThrowNothing() {
        RuntimeException cause = new RuntimeException("setup failed");
        IllegalStateException boom = new IllegalStateException("boom");
        Closer<AutoCloseable> c = new Closer<>();
        c.add(named("a"));
        c.add(failing("b", boom));
        c.closeAfter(cause);
        assertEquals(List.of("b", "a"), closed);
        assertArrayEquals(new Throwable[] {boom}, cause.getSuppressed());

        RuntimeException other = new RuntimeException("attach failed");
        Closer.closeAllAfter(other, named("x"), named("y"));
        assertEquals(List.of("b", "a", "y", "x"), closed);
        assertEquals(0, other.getSuppressed().length);
    }
}
