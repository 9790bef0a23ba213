package io.engramhost.os;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** Every syscall number engram-host uses, pinned to the kernel's own header of each architecture. */
class SyscallTest {
    /** From linux-libc-dev (amd64). */
    static final Path X86_64_HEADER = Path.of("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    /** aarch64 uses the generic table; linux-libc-dev of any architecture installs it. */
    static final Path AARCH64_HEADER = Path.of("/usr/include/asm-generic/unistd.h");
    private static final Pattern DEFINE = Pattern.compile("(?m)^#define __NR_(\\w+)\\s+(\\d+)\\s*$");

    @Test
    void shouldUseTheX8664NumbersOfTheKernelHeader() throws Exception {
        pin(Arch.X86_64, X86_64_HEADER);
    }

    @Test
    void shouldUseTheAarch64NumbersOfTheKernelHeader() throws Exception {
        pin(Arch.AARCH64, AARCH64_HEADER);
    }

    @Test
    void shouldKnowTheNumbersOnThisMachine() {
        Arch here = Arch.current();
        for (Syscall s : Syscall.values()) {
            assertEquals(s.number(here), s.number());
        }
    }

    private static void pin(Arch arch, Path header) throws Exception {
        assumeTrue(Files.isReadable(header), header + " is not installed (package linux-libc-dev): the " + arch
                + " syscall numbers cannot be checked against the kernel's header here");
        Map<String, Long> numbers = new HashMap<>();
        Matcher m = DEFINE.matcher(Files.readString(header));
        while (m.find()) {
            numbers.put(m.group(1), Long.parseLong(m.group(2)));
        }
        for (Syscall s : Syscall.values()) {
            Long expected = numbers.get(s.kernelName());
            assertNotNull(expected, header + " defines no __NR_" + s.kernelName());
            assertEquals(expected, s.number(arch), arch + " " + s.kernelName() + " in " + header);
        }
    }
}
