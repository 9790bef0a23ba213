package io.engramhost.cli;

import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideInAnyPackage;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideOutsideOfPackage;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The daemon's packages of docs/architecture.md ("The daemon's parts"), checked on its compiled main classes: the
 * root ({@code io.engramhost.daemon}) wires its sub-packages, each of which reaches only the sub-packages below it and
 * never the root, and no two of which reach each other (no cycle). A dependency that breaks this fails here, naming
 * the classes.
 */
class DaemonPackagesTest {
    private static final String ROOT = "io.engramhost.daemon";
    /** Each sub-package and the daemon sub-packages it may use besides itself (anything outside the daemon is free). */
    private static final Map<String, List<String>> MAY_USE = new LinkedHashMap<>();

    static {
        MAY_USE.put("loop", List.of()); // the poll loop knows nothing of how the daemon started, systemd, HTTP
        MAY_USE.put("http", List.of()); // the metrics port's server: given its probes and registry
        MAY_USE.put("launch", List.of("loop")); // an Adoption carries the connections handed over
        MAY_USE.put("handover", List.of("launch", "loop"));
        MAY_USE.put("systemd", List.of("handover", "launch")); // the fd store keeps the handover's catalog frame
    }

    private static JavaClasses daemon;

    @BeforeAll
    static void importClasses() {
        daemon = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
                .importPackages(ROOT);
    }

    private static String pkg(String sub) {
        return ROOT + "." + sub + "..";
    }

    @Test
    void theSubPackagesAreTheOnesDocumented() {
        TreeSet<String> found = new TreeSet<>();
        daemon.forEach(c -> {
            if (c.getPackageName().startsWith(ROOT + ".")) {
                found.add(c.getPackageName().substring(ROOT.length() + 1).split("\\.")[0]);
            }
        });
        assertEquals(new TreeSet<>(MAY_USE.keySet()), found, "the daemon's sub-packages (is the scan broken, or is a"
                + " new one missing from MAY_USE and docs/architecture.md?)");
    }

    @Test
    void eachSubPackageUsesOnlyThoseBelowIt() {
        for (Map.Entry<String, List<String>> e : MAY_USE.entrySet()) {
            List<String> allowed = new ArrayList<>();
            allowed.add(pkg(e.getKey()));
            e.getValue().forEach(p -> allowed.add(pkg(p)));
            classes().that().resideInAPackage(pkg(e.getKey())).should().onlyDependOnClassesThat(
                    resideOutsideOfPackage(ROOT + "..").or(resideInAnyPackage(allowed.toArray(String[]::new))))
                    .because("docs/architecture.md: " + ROOT + "." + e.getKey() + " uses only " + e.getValue()
                            + " of the daemon's packages")
                    .check(daemon);
        }
    }

    @Test
    void noSubPackageReachesTheRootThatWiresThem() {
        noClasses().that().resideInAPackage(ROOT + ".*..").should().dependOnClassesThat().resideInAPackage(ROOT)
                .because("the root (Daemon, DaemonLauncher, DaemonContext...) wires the sub-packages; they are given"
                        + " what they need")
                .check(daemon);
    }

    @Test
    void theSubPackagesAreFreeOfCycles() {
        slices().matching(ROOT + ".(*)..").should().beFreeOfCycles().check(daemon);
    }
}
