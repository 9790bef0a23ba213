package io.engramhost.checkpoint;

import java.util.List;

/**
 * What a checkpoint serves and how it is known: the {@link Selection} of its tensors, their
 * {@link ContentIdentity}, and the {@link Fingerprint} of both, checked against every {@link Limits limit}. The
 * one entry point for fingerprinting a path: {@code serve}, {@code inspect}, {@code verify} and the clients'
 * expectations all make it the same way, so they agree.
 */
public record ServedSelection(Selection selection, ContentIdentity identity, Fingerprint fingerprint) {

    /**
     * The selection of {@code checkpoint} for {@code tables} (the {@code --tables} globs; empty when not given) by
     * the three rules ({@link Selection#of}), the identity of what it selects ({@link ContentIdentity#of}: the
     * digest records beside the paths the checkpoint was opened from, the snapshot files among its files), and
     * the fingerprint a daemon serving them with {@code backend} ({@code ""}: any) would have, after the limits
     * ({@link Limits#checkServed(Checkpoint, Selection, ContentIdentity, String)}). Throws
     * {@link CheckpointException}, one line.
     */
    public static ServedSelection of(Checkpoint checkpoint, List<String> tables, String backend) {
        Selection selection = Selection.of(checkpoint, tables);
        ContentIdentity identity = ContentIdentity.of(checkpoint, selection.tensors());
        return new ServedSelection(selection, identity, Limits.checkServed(checkpoint, selection, identity, backend));
    }
}
