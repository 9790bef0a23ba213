package io.engramhost.client;

import io.engramhost.checkpoint.Checkpoint;
import io.engramhost.checkpoint.ServedSelection;
import io.engramhost.protocol.Expectation;
import java.nio.file.Path;
import java.util.List;
import java.util.function.Consumer;

/**
 * Expectations built from a checkpoint on disk: the structured fingerprint a daemon serving it would have, made
 * by the rules {@code serve} applies ({@link ServedSelection#of}: {@code --tables}, else the model's config.json,
 * else every tensor; the content identity of its digest records and Hugging Face snapshot), so that an engine names
 * the model directory and nothing else. Nothing is hashed: the headers, the records and the links are read.
 *
 * <pre>{@code
 * Expectation e = Expectations.ofCheckpoint(Path.of("/models/DeepSeek-V4.1-Flash"));
 * try (ImportedTables t = EngramClient.connect(socket, e, ClientOptions.defaults())) { ... }
 * }</pre>
 */
public final class Expectations {
    private Expectations() {
    }

    /**
     * The expectation of {@code paths} (a model directory, an index, or safetensors files) served with the default
     * selection, the content identity's notes said on standard error.
     */
    public static Expectation ofCheckpoint(Path... paths) {
        return ofCheckpoint(List.of(paths), List.of(), ClientOptions.defaults().notices());
    }

    /**
     * The expectation of {@code paths} served with {@code tables} ({@code serve --tables}; empty: the default rules).
     * The content identity's notes (a record that covers only some tables, one of version 1) go to
     * {@code notices}, one line each. (The selection's warning, every tensor selected, is {@code serve}'s and
     * {@code inspect}'s to say: an expectation that selects otherwise than the daemon is refused with one line that
     * names both selections.) Throws an {@link EngramClientException} (one line; the cause a
     * {@link io.engramhost.checkpoint.CheckpointException}) for a checkpoint or config.json that is not what it must
     * be.
     */
    public static Expectation ofCheckpoint(List<Path> paths, List<String> tables, Consumer<String> notices) {
        ServedSelection served;
        try {
            served = ServedSelection.of(Checkpoint.open(paths), tables, "");
        } catch (RuntimeException e) {
            throw EngramClientException.of(e);
        }
        served.identity().notes().forEach(notices);
        return Expectation.structured(served.fingerprint().canonicalBytes());
    }
}
