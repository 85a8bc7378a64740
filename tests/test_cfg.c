int main(void) { return 77; /* placeholder: skipped */ }
