package io.engramhost.checkpoint;

/**
 * A checkpoint is malformed, inconsistent, or could not be read. The message names the file, the tensor
 * where there is one, and the problem, e.g.
 * {@code model-00001.safetensors: tensor 'engram.layers.1.embedding.weight': F8_E4M3 [10, 256] needs 2560
 * bytes but data_offsets give 2559}.
 */
public class CheckpointException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public CheckpointException(String message) {
        super(message);
    }

    public CheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
