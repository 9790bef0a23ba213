package io.engramhost.testing;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Fails a test (each test of an annotated class) that leaves behind an owned fd, an open fd of the
 * kinds engram-host creates, a CUDA resource or an {@code engram-} thread, naming what it left
 * ({@link ResourceSnapshot}). A test that failed or was skipped is not checked: its own outcome is
 * reported.
 */
@Documented
@Inherited
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.TYPE, ElementType.METHOD})
@ExtendWith(LeakCheck.class)
public @interface NoLeaks {
}
