package io.engramhost.checkpoint;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.function.LongConsumer;

/**
 * Hugging Face cache snapshots (docs/checkpoints.md, "A Hugging Face snapshot"): {@code huggingface_hub} keeps
 * each file once, as {@code models--ORG--NAME/blobs/<SHA-256 of the whole file>}, and a snapshot
 * ({@code snapshots/REV/}) names it by a symbolic link, relative or absolute. A checkpoint file that is such a link
 * has that SHA-256 as its content identity, which the download checked; {@link #verify} checks it again.
 */
public final class HfSnapshot {
    /** The directory that holds the blobs. */
    public static final String BLOBS = "blobs";

    private HfSnapshot() {
    }

    /**
     * A snapshot file: {@code file}, the link as the checkpoint names it; {@code blob}, where it points (its
     * directory resolved against the link's); {@code sha256}, the blob's name.
     */
    public record Blob(Path file, Path blob, String sha256) {
    }

    /**
     * The blob {@code file} names when it is a symbolic link whose target's file name is 64 lower-case hex digits
     * in a directory named {@value #BLOBS}; empty otherwise (a regular file, or a link to anything else).
     */
    public static Optional<Blob> of(Path file) {
        if (!Files.isSymbolicLink(file)) {
            return Optional.empty();
        }
        Path target;
        try {
            target = Files.readSymbolicLink(file);
        } catch (IOException e) {
            throw new CheckpointException(file + ": cannot read the symbolic link: " + e, e);
        }
        Path name = target.getFileName();
        Path dir = target.getParent() == null ? null : target.getParent().getFileName();
        if (name == null || dir == null || !dir.toString().equals(BLOBS) || !TreeDigest.isHex(name.toString())) {
            return Optional.empty();
        }
        Path parent = file.toAbsolutePath().getParent();
        return Optional.of(new Blob(file, parent.resolve(target).normalize(), name.toString()));
    }

    /** The bytes of the files of {@code checkpoint} that {@code blobs} name: what {@link #verify} reads. */
    public static long bytes(Checkpoint checkpoint, List<Blob> blobs) {
        long n = 0;
        for (Blob b : blobs) {
            n += file(checkpoint, b).fileSize();
        }
        return n;
    }

    private static SafetensorsFile file(Checkpoint checkpoint, Blob b) {
        return checkpoint.files().stream().filter(f -> f.path().equals(b.file())).findFirst()
                .orElseThrow(() -> new IllegalArgumentException(b.file() + " is not a file of " + checkpoint));
    }

    /**
     * Checks every one of {@code blobs} (files of {@code checkpoint}) against its name: the SHA-256 of the whole
     * file, read through the fd it was validated from, on up to {@code threads} threads (one file each).
     * {@code progress} is told the bytes hashed as they are. Throws one {@link CheckpointException} line for the
     * first blob whose bytes do not match its name.
     */
    public static void verify(OpenCheckpoint checkpoint, List<Blob> blobs, int threads, LongConsumer progress) {
        List<SafetensorsFile> files = new ArrayList<>();
        for (Blob b : blobs) {
            files.add(file(checkpoint.checkpoint(), b));
        }
        WorkerThreads.forEach(blobs.size(), threads, "blob check", () -> null, (i, none) -> {
            SafetensorsFile f = files.get(i);
            String actual = TreeDigest.hex(SafetensorsFile.sha256(f.path().toString(), checkpoint.fd(f), 0,
                    f.fileSize(), progress));
            Blob b = blobs.get(i);
            if (!actual.equals(b.sha256())) {
                throw new CheckpointException(b.blob() + ": its SHA-256 is " + actual + ", not the blob's name: the"
                        + " download is damaged; delete the blob and download it again");
            }
        });
    }
}
