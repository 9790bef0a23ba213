package io.engramhost.util;

/**
 * Text that came from outside (a seeding peer, a daemon's ERROR, a checkpoint's tensor name) made safe to print as
 * part of one line: no peer may start a line of its own in a log or an exception, or reach the terminal.
 */
public final class Text {
    private Text() {
    }

    /**
     * {@code s} with every control character and Unicode line or paragraph separator escaped: a backslash and n, r
     * or t, else a backslash, u and four hex digits. A string without them is returned as it is.
     */
    public static String oneLine(String s) {
        int i = firstUnsafe(s);
        if (i == s.length()) {
            return s;
        }
        StringBuilder b = new StringBuilder(s.length() + 16).append(s, 0, i);
        for (; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (unsafe(c)) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.toString();
    }

    /** Whether {@code s} holds no control character and no line or paragraph separator: {@link #oneLine} keeps it. */
    public static boolean isOneLine(String s) {
        return firstUnsafe(s) == s.length();
    }

    private static int firstUnsafe(String s) {
        int i = 0;
        while (i < s.length() && !unsafe(s.charAt(i))) {
            i++;
        }
        return i;
    }

    private static boolean unsafe(char c) {
        return Character.isISOControl(c) || c == '\u2028' || c == '\u2029';
    }
}
