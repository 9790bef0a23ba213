package io.engramhost.testing;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;

/**
 * A test that needs an NVIDIA GPU: tagged {@code gpu} (excluded unless the build runs with -Pgpu) and
 * bounded by a timeout of {@value #TIMEOUT_SECONDS} s, which an own {@code @Timeout} overrides. The test
 * still assumes what it needs (e.g. {@code assumeTrue(Cuda.available(), Cuda.unavailabilityCause())}).
 */
@Documented
@Inherited
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.TYPE, ElementType.METHOD})
@Tag("gpu")
@Timeout(GpuTest.TIMEOUT_SECONDS)
public @interface GpuTest {
    long TIMEOUT_SECONDS = 120;
}
