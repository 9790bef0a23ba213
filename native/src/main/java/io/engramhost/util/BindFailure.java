package io.engramhost.util;

import java.util.regex.Pattern;

/**
 * A TCP listener's bind that failed, said as one line that names the fix: {@code serve --metrics-port} and
 * {@code --seed-listen} both put it after {@code cannot listen on ADDR:PORT (FLAG): }. The cause comes from the JDK
 * ({@link java.net.BindException}, "Address already in use") or from Netty's epoll transport, whose exception names
 * its own class and call ("bind(..) failed with error(-98): Address already in use"): both are said the same way,
 * the kernel's words first, then what to do.
 */
public final class BindFailure {
    /** Netty's epoll transport's prefix to the kernel's words: "bind(..) failed with error(-98): ". */
    private static final Pattern NETTY_PREFIX = Pattern.compile("^\\w+\\(\\.\\.\\) failed with error\\(-?\\d+\\): ");

    private BindFailure() {
    }

    /**
     * {@code e} (why the bind failed) as the kernel's words and the fix, naming {@code portFlag} for a port to change
     * and {@code addressFlag} for an address to change (the same flag where one gives both, as --seed-listen does).
     */
    public static String describe(Throwable e, String portFlag, String addressFlag) {
        String m = e.getMessage() == null ? e.getClass().getSimpleName() : Text.oneLine(e.getMessage());
        m = NETTY_PREFIX.matcher(m).replaceFirst("");
        if (m.contains("Address already in use")) {
            return m + ": another process listens on that port (ss -ltnp shows which): stop it, or give " + portFlag
                    + " another port";
        }
        if (m.contains("Cannot assign requested address")) {
            return m + ": no interface of this machine has that address (ip -brief address lists them): give " + addressFlag
                    + " one of them";
        }
        if (m.contains("Permission denied")) {
            return m + ": a port below 1024 needs root or CAP_NET_BIND_SERVICE: give " + portFlag
                    + " a port of 1024 or more";
        }
        return m;
    }
}
