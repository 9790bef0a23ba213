package io.engramhost.cli;

import static com.tngtech.archunit.base.DescribedPredicate.not;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideInAnyPackage;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideOutsideOfPackage;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.tngtech.archunit.base.DescribedPredicate;
import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The layering of docs/architecture.md, checked on the compiled classes of every module this one sees (all of them
 * but the benchmarks): each package may reach only the packages below it, nothing reaches the CLI, and no main class
 * reaches test code. A dependency that must never exist fails here, naming the classes.
 */
class LayeringTest {
    /** Each package (with its subpackages) and the engram-host packages it may use besides itself. */
    private static final Map<String, List<String>> MAY_USE = new LinkedHashMap<>();

    static {
        MAY_USE.put("util", List.of());
        MAY_USE.put("os", List.of("util"));
        MAY_USE.put("cuda", List.of("os", "util"));
        MAY_USE.put("numa", List.of("os", "cuda", "util"));
        MAY_USE.put("memfd", List.of("numa", "os", "util"));
        MAY_USE.put("vmm", List.of("numa", "os", "cuda", "util"));
        MAY_USE.put("json", List.of());
        MAY_USE.put("protocol", List.of("os", "util"));
        MAY_USE.put("checkpoint", List.of("json", "os", "util"));
        MAY_USE.put("hooks", List.of());
        MAY_USE.put("seed", List.of("checkpoint", "json", "os", "util"));
        MAY_USE.put("client", List.of("protocol", "checkpoint", "json", "memfd", "vmm", "numa", "os", "cuda", "util"));
        MAY_USE.put("store", List.of("hooks", "seed", "checkpoint", "json", "protocol", "memfd", "vmm", "numa", "os", "cuda",
                "util"));
        MAY_USE.put("daemon", List.of("store", "hooks", "seed", "checkpoint", "json", "protocol", "memfd", "vmm", "numa", "os",
                "cuda", "util"));
    }

    private static JavaClasses main;
    private static JavaClasses all;

    @BeforeAll
    static void importClasses() {
        main = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
                .importPackages("io.engramhost");
        all = new ClassFileImporter().importPackages("io.engramhost");
    }

    private static String pkg(String name) {
        return "io.engramhost." + name + "..";
    }

    @Test
    void theImportSeesEveryLayer() {
        for (String p : MAY_USE.keySet()) {
            assertTrue(main.stream().anyMatch(c -> c.getPackageName().startsWith("io.engramhost." + p)),
                    "no class of io.engramhost." + p + " was imported: is the scan broken?");
        }
        assertTrue(main.stream().anyMatch(c -> c.getPackageName().equals("io.engramhost.cli")));
    }

    @Test
    void eachLayerUsesOnlyTheLayersBelowIt() {
        for (Map.Entry<String, List<String>> e : MAY_USE.entrySet()) {
            List<String> allowed = new ArrayList<>();
            allowed.add(pkg(e.getKey()));
            e.getValue().forEach(p -> allowed.add(pkg(p)));
            classes().that().resideInAPackage(pkg(e.getKey())).should().onlyDependOnClassesThat(
                    resideOutsideOfPackage("io.engramhost..").or(resideInAnyPackage(allowed.toArray(String[]::new))))
                    .because("docs/architecture.md: io.engramhost." + e.getKey() + " uses only " + e.getValue())
                    .check(main);
        }
    }

    @Test
    void theClientLibraryStaysFreeOfTheDaemonAndTheCommandLine() {
        noClasses().that().resideInAPackage(pkg("client")).should().dependOnClassesThat()
                .resideInAnyPackage(pkg("daemon"), pkg("store"), pkg("hooks"), pkg("cli"), "picocli..", "io.prometheus..",
                        "io.netty..")
                .because("an engine depends on the client artifact alone").check(main);
    }

    @Test
    void nothingReachesTheCommandLine() {
        noClasses().that().resideOutsideOfPackage(pkg("cli")).should().dependOnClassesThat().resideInAPackage(pkg("cli"))
                .because("the CLI is the top layer").check(main);
    }

    @Test
    void noMainClassReachesTestCode() {
        DescribedPredicate<JavaClass> testCode = new DescribedPredicate<>("test code") {
            @Override
            public boolean test(JavaClass c) {
                String where = c.getSource().map(s -> s.getUri().toString()).orElse("");
                return where.contains("/test-classes/") || where.contains("-tests.jar");
            }
        };
        noClasses().that(not(testCode)).should().dependOnClassesThat(testCode)
                .because("no test hook ships in main code: tests reach main code, never the other way").check(all);
    }

    /** The fault-injection variables live in the test jar ({@code io.engramhost.cli.testing}) and nowhere else. */
    @Test
    void noMainSourceNamesATestVariable() throws IOException {
        Path root = Path.of(System.getProperty("user.dir")).toAbsolutePath();
        while (!Files.exists(root.resolve("bin/engram-host"))) {
            root = root.getParent();
        }
        List<String> found = new ArrayList<>();
        try (Stream<Path> files = Files.walk(root)) {
            for (Path f : (Iterable<Path>) files.filter(p -> p.toString().endsWith(".java")
                    && p.toString().contains("/src/main/java/") && !p.toString().contains("/target/"))::iterator) {
                if (Files.readString(f).contains("ENGRAM_HOST_TEST_")) {
                    found.add(root.relativize(f).toString());
                }
            }
        }
        assertEquals(List.of(), found, "main code naming an ENGRAM_HOST_TEST_ variable");
    }
}
