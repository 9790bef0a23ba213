package io.engramhost.cli;

import io.engramhost.protocol.Backend;
import java.util.Iterator;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.TypeConversionException;

/**
 * The Picocli side of the options whose values are an enum spelt by a wire name: a converter that
 * fails naming the allowed values (a usage error, exit 2) and the completion candidates that
 * {@code --help} lists through {@code ${COMPLETION-CANDIDATES}}.
 */
final class WireNameOptions {
    private WireNameOptions() {
    }

    /** {@code --backend}: {@link Backend#of(String)}. */
    static final class BackendConverter implements ITypeConverter<Backend> {
        @Override
        public Backend convert(String value) {
            try {
                return Backend.of(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    /** {@code --backend}'s values, for {@code --help} and completion. */
    static final class BackendNames implements Iterable<String> {
        @Override
        public Iterator<String> iterator() {
            return Backend.wireNames().iterator();
        }
    }

    /** {@code import --digest}: {@link DigestKind#of(String)}. */
    static final class DigestConverter implements ITypeConverter<DigestKind> {
        @Override
        public DigestKind convert(String value) {
            try {
                return DigestKind.of(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    /** {@code import --digest}'s values, for {@code --help} and completion. */
    static final class DigestNames implements Iterable<String> {
        @Override
        public Iterator<String> iterator() {
            return DigestKind.names().iterator();
        }
    }
}
