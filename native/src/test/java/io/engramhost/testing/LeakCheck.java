package io.engramhost.testing;

import io.engramhost.cuda.Cuda;
import io.engramhost.os.Posix;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/** The extension behind {@link NoLeaks}: a {@link ResourceSnapshot} before each test, compared after it. */
public final class LeakCheck implements BeforeEachCallback, AfterEachCallback {
    /** How long what a test closed may take to go (a thread ending after its owner closed). */
    static final Duration GRACE = Duration.ofSeconds(2);
    private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(LeakCheck.class);

    private final Duration grace;

    public LeakCheck() {
        this(GRACE);
    }

    LeakCheck(Duration grace) {
        this.grace = grace;
    }

    @Override
    public void beforeEach(ExtensionContext context) {
        warmUp();
        context.getStore(NAMESPACE).put(context.getUniqueId(), ResourceSnapshot.take());
    }

    /**
     * Opens what a process opens once and keeps for its life, so that the first test to use it is not
     * blamed: libc through JNR, and where there is a GPU the driver and GPU 0's primary context.
     */
    private static void warmUp() {
        Posix.getpid();
        if (Cuda.available()) {
            Cuda.useDevice(0);
        }
    }

    @Override
    public void afterEach(ExtensionContext context) throws InterruptedException {
        ResourceSnapshot before = context.getStore(NAMESPACE).remove(context.getUniqueId(), ResourceSnapshot.class);
        if (before == null || context.getExecutionException().isPresent()) {
            return;
        }
        List<String> leaks = ResourceSnapshot.leaksAfter(before, grace);
        if (!leaks.isEmpty()) {
            throw new AssertionError(context.getDisplayName() + " left behind: " + String.join("; ", leaks));
        }
    }
}
