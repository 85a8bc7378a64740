/* onnx.h — models in and out of ragtag as ONNX files (docs/onnx.md).
 *
 * Export writes a model file plus its weights as one ONNX graph (opset 13):
 * input "input" [N, C, H, W], outputs "logits" [N, classes] (what [softmax]
 * receives) and "probabilities" (their softmax). Import reads an ONNX graph
 * of the operators ragtag's layers cover and writes DIR/model.cfg and
 * DIR/weights.safetensors (a ragtag checkpoint: `ragtag eval`, `--init`).
 *
 * Both parse and write ONNX through protobuf-c and the ONNX schema
 * (src/onnx.proto); built without protobuf-c they fail with RT_ERR_UNSUPPORTED
 * saying so. */
#ifndef RT_ONNX_H
#define RT_ONNX_H

/* Model file + safetensors weights (a checkpoint or --save file) -> ONNX. */
int rt_onnx_export(const char *model_path, const char *weights_path, const char *onnx_path);

/* ONNX -> out_dir/model.cfg + out_dir/weights.safetensors (out_dir is made
 * when missing). An operator, attribute or graph shape ragtag cannot express
 * is RT_ERR_UNSUPPORTED naming the node, its operator and what is wrong. */
int rt_onnx_import(const char *onnx_path, const char *out_dir);

/* The names of the files import writes inside out_dir. */
#define RT_ONNX_IMPORT_CFG "model.cfg"
#define RT_ONNX_IMPORT_WEIGHTS "weights.safetensors"

#endif
