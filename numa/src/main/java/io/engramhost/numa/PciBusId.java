package io.engramhost.numa;

import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A PCI address as sysfs names it: {@code dddd:bb:dd.f} in lower-case hex with at least four domain
 * digits. CUDA's form ({@code 00000000:1B:00.0}, eight domain digits, upper case) and a form without
 * a domain ({@code 1b:00.0}, domain 0) are accepted.
 */
public final class PciBusId {
    private static final Pattern FORM = Pattern.compile(
            "(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\\.([0-7])");

    private PciBusId() {
    }

    /** {@code 00000000:1B:00.0} becomes {@code 0000:1b:00.0}; anything else is an error. */
    public static String normalise(String busId) {
        Matcher m = FORM.matcher(busId == null ? "" : busId.strip());
        if (!m.matches()) {
            throw new IllegalArgumentException("not a PCI bus id: '" + busId
                    + "' (expected dddd:bb:dd.f, e.g. 0000:1b:00.0 or CUDA's 00000000:1B:00.0)");
        }
        long domain = m.group(1) == null ? 0 : Long.parseLong(m.group(1), 16);
        return String.format(Locale.ROOT, "%04x:%02x:%02x.%s", domain, Integer.parseInt(m.group(2), 16),
                Integer.parseInt(m.group(3), 16), m.group(4));
    }
}
