"""Where runs are looked at: TensorBoard served on the runs folder, and the kit's offline tabs in it (Profile and Trace timeline)."""
