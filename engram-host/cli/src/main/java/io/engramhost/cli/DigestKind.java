package io.engramhost.cli;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/** What {@code import --digest} computes over every imported table. */
enum DigestKind {
    /** SHA-256 of every table, hashed through the mapping. */
    SHA256,
    /** The daemon's engram digest, recomputed through the mapping; a difference fails the import. */
    ENGRAM;

    /** The name as the option spells it: {@code sha256}, {@code engram}. */
    String optionName() {
        return name().toLowerCase(Locale.ROOT);
    }

    static List<String> names() {
        return Arrays.stream(values()).map(DigestKind::optionName).toList();
    }

    /** The kind named {@code name}; throws naming the allowed values otherwise. */
    static DigestKind of(String name) {
        for (DigestKind k : values()) {
            if (k.optionName().equals(name)) {
                return k;
            }
        }
        throw new IllegalArgumentException("'" + name + "' is not one of " + String.join(", ", names()));
    }

    @Override
    public String toString() {
        return optionName();
    }
}
