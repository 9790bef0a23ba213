package io.engramhost.vmm;

/** The GPU lacks a capability the cuda-vmm backend needs; the message names it and the way out. */
public class VmmUnsupportedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    public VmmUnsupportedException(String message) {
        super(message);
    }
}
