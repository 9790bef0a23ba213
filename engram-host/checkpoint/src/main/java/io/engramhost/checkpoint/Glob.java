package io.engramhost.checkpoint;

import java.util.regex.Pattern;

/**
 * A tensor-name pattern: {@code *} matches any run of characters (dots included), {@code ?} one character,
 * everything else itself. {@code engram.layers.*.embedding.*} selects every Engram table.
 */
public final class Glob {
    private final String text;
    private final Pattern pattern;

    private Glob(String text, Pattern pattern) {
        this.text = text;
        this.pattern = pattern;
    }

    public static Glob of(String text) {
        if (text == null || text.isEmpty()) {
            throw new IllegalArgumentException("empty tensor name pattern");
        }
        StringBuilder re = new StringBuilder();
        StringBuilder literal = new StringBuilder();
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '*' || c == '?') {
                if (literal.length() > 0) {
                    re.append(Pattern.quote(literal.toString()));
                    literal.setLength(0);
                }
                re.append(c == '*' ? ".*" : ".");
            } else {
                literal.append(c);
            }
        }
        if (literal.length() > 0) {
            re.append(Pattern.quote(literal.toString()));
        }
        return new Glob(text, Pattern.compile(re.toString(), Pattern.DOTALL));
    }

    public boolean matches(String name) {
        return pattern.matcher(name).matches();
    }

    /** True for the pattern {@code *}, which selects everything. */
    public boolean matchesAll() {
        return text.equals("*");
    }

    @Override
    public String toString() {
        return text;
    }
}
