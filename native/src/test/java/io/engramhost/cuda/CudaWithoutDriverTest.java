package io.engramhost.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import io.engramhost.os.Fd;
import io.engramhost.os.Posix;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.nio.file.FileSystem;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * On a machine without a usable driver (CI, the build machine): the cause names the driver library,
 * and every public entry point of {@code io.engramhost.cuda} that needs the driver refuses with a
 * {@link CudaUnavailableException} carrying that cause, before touching anything else.
 */
class CudaWithoutDriverTest {
    /** The public static methods that work without a driver: pure functions and the probe itself. */
    private static final Set<String> NEED_NO_DRIVER = Set.of("Cuda.available", "Cuda.unavailabilityCause",
            "Cuda.check", "CudaErrors.name", "CudaErrors.describe", "CudaResources.live", "GpuChecksum.cpu",
            "GpuChecksum.xorWords", "GpuKernels.ptx", "Location.device", "Location.hostNuma");

    @Test
    void shouldNameTheDriverAndRefuseEveryEntryPointWithThatCause() throws Exception {
        assumeFalse(Cuda.available(), "this machine has a working CUDA driver and GPU; the no-driver path is not seen here");
        String cause = Cuda.unavailabilityCause();
        assertTrue(cause.contains(Cuda.LIBRARY), "the cause names the driver library: " + cause);
        String refusal = "CUDA is not available: " + cause;

        List<String> refused = new ArrayList<>();
        try (Fd fd = Posix.memfdCreate("not imported", 0)) {
            for (Method m : entryPoints()) {
                Object[] args = arguments(m, fd);
                InvocationTargetException e = assertThrows(InvocationTargetException.class, () -> m.invoke(null, args),
                        name(m) + " returned without a driver");
                assertInstanceOf(CudaUnavailableException.class, e.getCause(), name(m) + " threw " + e.getCause());
                assertEquals(refusal, e.getCause().getMessage(), name(m));
                refused.add(name(m));
            }
        }
        assertTrue(refused.containsAll(List.of("Cuda.ensureAvailable", "Cuda.device", "Cuda.useDevice",
                "DeviceBuffer.allocate", "HostRegistration.register", "PinnedHostBuffer.allocate", "GpuKernels.load",
                "MemHandle.create", "MemHandle.importFd", "VaRange.reserve", "CudaModule.load")), "entry points checked: " + refused);
        assertFalse(Cuda.available(), "asking again gives the same answer");
        assertEquals(cause, Cuda.unavailabilityCause());
        assertTrue(GpuKernels.ptx().length > 0, "the PTX ships in the jar even where it cannot load");
    }

    /**
     * The public static methods of the package's public classes that need the driver. Those taking a
     * CUDA owner (a VaRange, a MemHandle) cannot be reached without one and are left out.
     */
    private static List<Method> entryPoints() throws Exception {
        List<Method> out = new ArrayList<>();
        for (Class<?> c : packageClasses()) {
            if (!Modifier.isPublic(c.getModifiers())) {
                continue;
            }
            for (Method m : c.getDeclaredMethods()) {
                boolean takesOwner = Stream.of(m.getParameterTypes()).anyMatch(CudaOwner.class::isAssignableFrom);
                if (Modifier.isPublic(m.getModifiers()) && Modifier.isStatic(m.getModifiers()) && !takesOwner
                        && !NEED_NO_DRIVER.contains(name(m))) {
                    out.add(m);
                }
            }
        }
        return out;
    }

    /** Every top-level class of io.engramhost.cuda, read from the directory or jar it was loaded from. */
    private static List<Class<?>> packageClasses() throws Exception {
        Path root = Path.of(Cuda.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<Class<?>> classes = new ArrayList<>();
        if (Files.isDirectory(root)) {
            addClasses(root.resolve("io/engramhost/cuda"), classes);
        } else {
            try (FileSystem jar = FileSystems.newFileSystem(URI.create("jar:" + root.toUri()), Map.of())) {
                addClasses(jar.getPath("io/engramhost/cuda"), classes);
            }
        }
        return classes;
    }

    private static void addClasses(Path dir, List<Class<?>> classes) throws Exception {
        try (Stream<Path> files = Files.list(dir)) {
            for (Path f : files.sorted().toList()) {
                String file = f.getFileName().toString();
                if (file.endsWith(".class") && !file.contains("$") && !file.equals("package-info.class")) {
                    classes.add(Class.forName("io.engramhost.cuda." + file.substring(0, file.length() - 6)));
                }
            }
        }
    }

    /** Plausible arguments: sizes that pass the size checks made before the driver is asked. */
    private static Object[] arguments(Method m, Fd fd) {
        Class<?>[] types = m.getParameterTypes();
        Object[] args = new Object[types.length];
        for (int i = 0; i < types.length; i++) {
            Class<?> t = types[i];
            args[i] = t == int.class ? 0 : t == long.class ? 2L << 20 : t == boolean.class ? true : t == byte.class
                    ? (byte) 0 : t == String.class ? "without driver" : t == byte[].class ? new byte[] {0}
                    : t == Location.class ? Location.device(0) : t == Fd.class ? fd : null;
            if (args[i] == null) {
                throw new AssertionError(name(m) + " takes a " + t.getName() + ": teach this test a value for it");
            }
        }
        return args;
    }

    private static String name(Method m) {
        return m.getDeclaringClass().getSimpleName() + "." + m.getName();
    }
}
