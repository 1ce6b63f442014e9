/* Broken: exports neither SE_InitPlugin nor TF_InitKernel.
 * Expected: quarantined, "exports neither SE_InitPlugin nor TF_InitKernel". */
int no_entry_points_here(void) { return 42; }
