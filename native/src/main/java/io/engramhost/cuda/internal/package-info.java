/**
 * The JNR binding to libcuda and the layouts of the driver's structs. Internal: do not use
 * directly; {@link io.engramhost.cuda.Cuda} and the owners in {@link io.engramhost.cuda} check
 * every CUresult and name the call.
 */
package io.engramhost.cuda.internal;
